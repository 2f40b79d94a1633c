// A project's glossary (include/attnkit/po/glossary.h): read as Weblate and Poedit export it,
// its terms found as translators' tools find them, and `po check --glossary`'s findings.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "attnkit/core/error.h"
#include "attnkit/data/po_catalog.h"
#include "attnkit/po/check.h"
#include "attnkit/po/glossary.h"
#include "attnkit/po/protect.h"

using namespace attnkit;
using po::Glossary;

namespace {

std::vector<std::string> found(const Glossary& g, const std::string& message) {
  std::vector<std::string> out;
  for (const auto* t : g.found_in(message)) out.push_back(t->source);
  return out;
}

}  // namespace

TEST(PoGlossary, ReadsTsvAndCsvAsTheyAreExported) {
  const auto tsv = Glossary::parse(
      "source\ttarget\n# terms of the file manager\n\nfile\tDatei\ndirectory\tOrdner\tnote\n",
      "g.tsv", /*csv=*/false);
  ASSERT_EQ(tsv.terms().size(), 2u);
  EXPECT_EQ(tsv.terms()[0].target, "Datei");
  EXPECT_EQ(tsv.terms()[0].line, 4u);
  EXPECT_EQ(tsv.terms()[1].source, "directory");
  const auto csv = Glossary::parse(
      "\"source\",\"target\",\"context\"\r\n\"save as\",\"Speichern unter\",\"\"\r\n"
      "\"a, b\",\"x \"\"y\"\"\",\r\n",
      "g.csv", /*csv=*/true);
  ASSERT_EQ(csv.terms().size(), 2u);
  EXPECT_EQ(csv.terms()[0].target, "Speichern unter");
  EXPECT_EQ(csv.terms()[1].source, "a, b");
  EXPECT_EQ(csv.terms()[1].target, "x \"y\"");
  EXPECT_EQ(csv.terms()[1].line, 3u);
  try {
    Glossary::parse("file\tDatei\nfolder\n", "g.tsv", false);
    FAIL() << "a line without a translation was read";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("g.tsv:2: ", 0), 0u) << e.what();
  }
}

TEST(PoGlossary, FindsTermsInTheirPluralWithoutTheAccelerator) {
  const auto g =
      Glossary::parse("file\tDatei\ndirectory\tOrdner\nsave as\tSpeichern unter\n", "g.tsv", false);
  EXPECT_EQ(found(g, "Open the _Files"), (std::vector<std::string>{"file"}));
  EXPECT_EQ(found(g, "Two directories and a file"),
            (std::vector<std::string>{"file", "directory"}));
  EXPECT_EQ(found(g, "_Save As..."), (std::vector<std::string>{"save as"}));
  EXPECT_TRUE(found(g, "Profile filed").empty());  // whole words only
  EXPECT_TRUE(Glossary::carries("Öffne die _Dateien", g.terms()[0]));
  EXPECT_TRUE(Glossary::carries("打开文件(_F)", {"file", "文件", 1}));
  EXPECT_FALSE(Glossary::carries("Öffne das Dokument", g.terms()[0]));
}

TEST(PoGlossary, CheckReportsEachEntryThatLacksATermsTranslation) {
  const auto g = Glossary::parse("file\tDatei\n", "g.tsv", false);
  const auto catalog = data::PoCatalog::parse(
      "msgid \"\"\nmsgstr \"Content-Type: text/plain; charset=UTF-8\\nPlural-Forms: "
      "nplurals=2; plural=(n != 1);\\n\"\n\n"
      "msgid \"Open the file\"\nmsgstr \"Öffne die Datei\"\n\n"         // 4
      "msgid \"Close the file\"\nmsgstr \"Schließe das Dokument\"\n\n"  // 7
      "msgid \"%d file\"\nmsgid_plural \"%d files\"\n"                  // 10
      "msgstr[0] \"%d Datei\"\nmsgstr[1] \"%d Dokumente\"\n",
      "de.po");
  po::CheckOptions options;
  options.glossary = &g;
  std::vector<std::pair<size_t, std::string>> got;
  for (const auto& f : po::check(catalog, options))
    if (f.kind == po::CheckKind::Glossary) got.emplace_back(f.line, f.message);
  EXPECT_EQ(got, (std::vector<std::pair<size_t, std::string>>{
                     {7, "\"file\" is \"Datei\" in the glossary (line 1)"},
                     {10, "msgstr[1]: \"file\" is \"Datei\" in the glossary (line 1)"}}));
  // Without the glossary, no such finding.
  for (const auto& f : po::check(catalog)) EXPECT_NE(f.kind, po::CheckKind::Glossary);
}

TEST(PoGlossary, TermsAreFoundWholeAtAPosition) {
  const auto g =
      Glossary::parse("file\tDatei\nfile name\tDateiname\nentry\tEintrag\n", "g.tsv", false);
  const po::GlossaryTerm* term = nullptr;
  EXPECT_EQ(g.term_at("Open File Name now", 5, &term), 9u);  // the longest, case aside
  EXPECT_EQ(term->target, "Dateiname");
  EXPECT_EQ(g.term_at("two files", 4, &term), 5u);
  EXPECT_EQ(term->target, "Datei");
  EXPECT_EQ(g.term_at("two entries", 4, &term), 7u);  // y -> ies
  EXPECT_EQ(g.term_at("profile", 3), 0u);             // not at a word's start
  EXPECT_EQ(g.term_at("filed", 0), 0u);               // nor ending inside one
}

TEST(PoGlossary, ProtectMasksTermsAndRestorePutsTheirTargets) {
  const auto g = Glossary::parse("layer\tEbene\nchannel\tKanal\n", "g.tsv", false);
  const auto p = po::protect("Merge the layers into a channel", true, {}, &g);
  EXPECT_EQ(p.text, "Merge the %s into a %s");
  EXPECT_EQ(p.spans, (std::vector<std::string>{"Ebene", "Kanal"}));
  EXPECT_EQ(p.terms, 2u);
  // The model wrote "%s in %s zusammenführen"; its masks attended to the source's in order.
  const std::vector<std::string> source = {"merge", "the", "%s", "into", "a", "%s"};
  auto attention = at::full({5, 6}, 0.01f);
  attention[0][2] = attention[1][3] = attention[2][5] = attention[3][0] = 0.9f;
  const auto out = po::restore(
      p, {"%s", "in", "%s", "zusammenführen"}, attention, source,
      [](const std::vector<std::string>& t) {
        std::string s;
        for (const auto& w : t) s += (s.empty() ? "" : " ") + w;
        return s;
      },
      po::AcceleratorStyle::Inline);
  EXPECT_EQ(out, "Ebene in Kanal zusammenführen");
  // Without a glossary the words stay the model's to translate.
  EXPECT_EQ(po::protect("_Merge the layers into a channel").text,
            "Merge the layers into a channel");
}
