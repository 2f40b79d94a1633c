// `po check` (include/attnkit/po/check.h): one entry per kind of finding, each found at its line,
// and entries a careful translator writes found clean.
#include <gtest/gtest.h>

#include <map>

#include "attnkit/data/po_catalog.h"
#include "attnkit/po/check.h"

using namespace attnkit;

namespace {

std::map<size_t, std::vector<std::string>> findings(const std::string& po,
                                                    const std::string& lang) {
  const auto catalog = data::PoCatalog::parse(po, "t.po");
  po::CheckOptions options;
  options.lang = lang;
  std::map<size_t, std::vector<std::string>> out;
  for (const auto& f : po::check(catalog, options)) out[f.line].push_back(po::to_string(f.kind));
  return out;
}

const std::string kHeader =
    "msgid \"\"\nmsgstr \"\"\n\"Content-Type: text/plain; charset=UTF-8\\n\"\n"
    "\"Plural-Forms: nplurals=3; plural=(n%10==1 && n%100!=11 ? 0 : n%10>=2 && n%10<=4 && "
    "(n%100<10 || n%100>=20) ? 1 : 2);\\n\"\n\n";

}  // namespace

TEST(PoCheck, EachKindOfFindingAtItsLine) {
  const std::string po =
      kHeader +
      "msgid \"Copy %s to %d\"\nmsgstr \"Kopiere %s\"\n\n"       // 6
      "msgid \"Run --help\"\nmsgstr \"Hilfe\"\n\n"               // 9
      "msgid \"_Open\"\nmsgstr \"Öffnen\"\n\n"                   // 12
      "msgid \"Open the file\"\nmsgstr \"Open the file\"\n\n"    // 15
      "msgid \"Save the the file\"\nmsgstr \"Sichern\"\n\n"      // 18
      "msgid \"Save file\"\nmsgstr \"Datei Datei sichern\"\n\n"  // 21
      "msgid \"Name:\"\nmsgstr \"Name\"\n\n"                     // 24
      "msgid \"Done\\n\"\nmsgstr \"Fertig\"\n\n"                 // 27
      "msgid \"One file\"\nmsgid_plural \"%d files\"\n"          // 30
      "msgstr[0] \"Один файл\"\nmsgstr[1] \"%d файла\"\nmsgstr[2] \"%d файлов\"\n\n"
      "msgid \"_Close\"\nmsgstr \"_Schließen\"\n\n"   // 36: clean
      "msgid \"Open…\"\nmsgstr \"Öffnen...\"\n\n"     // 39: clean
      "#, fuzzy\nmsgid \"Quit\"\nmsgstr \"Quit\"\n";  // fuzzy
  const auto f = findings(po, "ru");
  EXPECT_EQ(f.at(6), std::vector<std::string>{"placeholders"});
  EXPECT_EQ(f.at(9), std::vector<std::string>{"spans"});
  EXPECT_EQ(f.at(12), std::vector<std::string>{"accelerator"});
  EXPECT_EQ(f.at(15), std::vector<std::string>{"identical"});
  EXPECT_EQ(f.count(18), 0u);  // the repetition is the source's
  EXPECT_EQ(f.at(21), std::vector<std::string>{"repeated"});
  EXPECT_EQ(f.at(24), std::vector<std::string>{"punctuation"});
  EXPECT_EQ(f.at(27), std::vector<std::string>{"whitespace"});
  // Russian's form 0 serves 1, 21, 31, ...: it must print the number.
  EXPECT_EQ(f.at(30), std::vector<std::string>{"plural-number"});
  EXPECT_EQ(f.count(36), 0u);
  EXPECT_EQ(f.count(39), 0u);
  EXPECT_EQ(f.size(), 8u);
}

TEST(PoCheck, EnglishLeftInAChineseTargetAndTheSingularOfAGermanPlural) {
  const std::string zh =
      "msgid \"\"\nmsgstr \"Content-Type: text/plain; charset=UTF-8\\n\"\n\n"
      "msgid \"Select the layer\"\nmsgstr \"选择 layer\"\n\n"  // 4
      "msgid \"GTK+ theme\"\nmsgstr \"GTK+ 主题\"\n";          // 7: a name, upper case
  const auto f = findings(zh, "zh_CN");
  EXPECT_EQ(f.at(4), std::vector<std::string>{"untranslated"});
  EXPECT_EQ(f.count(7), 0u);
  const std::string de =
      "msgid \"\"\nmsgstr \"\"\n\"Content-Type: text/plain; charset=UTF-8\\n\"\n"
      "\"Plural-Forms: nplurals=2; plural=(n != 1);\\n\"\n\n"
      "msgid \"%d file\"\nmsgid_plural \"%d files\"\nmsgstr[0] \"Eine Datei\"\nmsgstr[1] \"%d "
      "Dateien\"\n\n"
      "msgid \"%d dir\"\nmsgid_plural \"%d dirs\"\nmsgstr[0] \"%d Ordner\"\nmsgstr[1] \"Ordner\"\n";
  const auto g = findings(de, "de");
  EXPECT_EQ(g.count(6), 0u);  // form 0 serves 1 alone: the number may go
  EXPECT_EQ(g.at(11), std::vector<std::string>{"plural-number"});
}
