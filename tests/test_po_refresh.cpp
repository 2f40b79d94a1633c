// Fuzzy entries whose English changed (include/attnkit/po/refresh.h): each kind of cosmetic
// change carried into the translation, and the changes that are not cosmetic refused.
#include <gtest/gtest.h>

#include "attnkit/data/po_catalog.h"
#include "attnkit/po/refresh.h"

using namespace attnkit;
using po::AcceleratorStyle;
using po::carry_over;

namespace {

using RefreshChanges = std::vector<std::string>;

std::string carried_over(const std::string& before, const std::string& after, const std::string& t,
                         RefreshChanges* changes = nullptr,
                         AcceleratorStyle style = AcceleratorStyle::Appended) {
  RefreshChanges local;
  const auto out = carry_over(before, after, t, style, changes ? changes : &local);
  return out ? *out : "<refused>";
}

}  // namespace

TEST(PoRefresh, WhitespaceAtEitherEndFollowsTheEnglish) {
  RefreshChanges c;
  EXPECT_EQ(carried_over("Open file ", "Open file", "打开文件 ", &c), "打开文件");
  EXPECT_EQ(c, RefreshChanges{"whitespace"});
  EXPECT_EQ(carried_over("Usage:", "\nUsage:\n", "用法："), "\n用法：\n");
  // Whitespace inside: the translation's own line breaks stay.
  EXPECT_EQ(carried_over("Show  all", "Show all", "Alle anzeigen"), "Alle anzeigen");
  // The translator's own blanks stay where the English's did not change.
  EXPECT_EQ(carried_over("Name", "Name:", "  Name"), "  Name:");
}

TEST(PoRefresh, TrailingPunctuationInTheTranslationsWidth) {
  RefreshChanges c;
  EXPECT_EQ(carried_over("Open", "Open...", "Öffnen", &c), "Öffnen...");
  EXPECT_EQ(c, RefreshChanges{"punctuation"});
  EXPECT_EQ(carried_over("Save As", "Save As\xe2\x80\xa6", "Speichern unter"),
            "Speichern unter\xe2\x80\xa6");
  EXPECT_EQ(carried_over("Open...", "Open", "Öffnen …"), "Öffnen");  // no blank left behind
  EXPECT_EQ(carried_over("Open...", "Open:", "Öffnen\xe2\x80\xa6"), "Öffnen:");
  EXPECT_EQ(carried_over("Name", "Name:", "名称"), "名称：");  // CJK: full width
  EXPECT_EQ(carried_over("Done", "Done.", "完成"), "完成。");
  EXPECT_EQ(carried_over("Name:", "Name", "名称："), "名称");
  EXPECT_EQ(carried_over("Open...", "Open\xe2\x80\xa6", "打开\xe2\x80\xa6"), "打开\xe2\x80\xa6");
  EXPECT_EQ(carried_over("Done", "Done!", "Fertig"), "Fertig!");
  // A translator who left the punctuation out leaves it out.
  EXPECT_EQ(carried_over("Name:", "Name...", "Name"), "Name");
}

TEST(PoRefresh, PlaceholdersRenamedByPosition) {
  RefreshChanges c;
  EXPECT_EQ(carried_over("%s of %s", "%1$s of %2$s", "%s 的 %s", &c), "%1$s 的 %2$s");
  EXPECT_EQ(c, RefreshChanges{"placeholders"});
  // The arguments swapped in the English: the translation's, which had moved them, follow.
  EXPECT_EQ(carried_over("Copy %1$s to %2$s", "Copy %2$s to %1$s", "%2$s: %1$s kopieren"),
            "%1$s: %2$s kopieren");
  EXPECT_EQ(carried_over("%d files", "%ld files", "%d Dateien"), "%ld Dateien");
  EXPECT_EQ(carried_over("Delete {name}?", "Delete {filename}?", "{name} löschen?"),
            "{filename} löschen?");
  // A numbered placeholder that became two is not a renaming.
  EXPECT_EQ(carried_over("%1$s and %1$s", "%1$s and %2$s", "%1$s und %1$s", &c), "<refused>");
  // A translation with a placeholder the English had not cannot follow.
  EXPECT_EQ(carried_over("%s of %s", "%1$s of %2$s", "%s von %d"), "<refused>");
}

TEST(PoRefresh, AcceleratorsPlacedAndTakenOutAsTheLanguagePlacesThem) {
  RefreshChanges c;
  EXPECT_EQ(carried_over("Open", "_Open", "打开", &c), "打开(_O)");
  EXPECT_EQ(c, RefreshChanges{"accelerator"});
  EXPECT_EQ(carried_over("Open", "_Open", "Öffnen", nullptr, AcceleratorStyle::Inline), "_Öffnen");
  EXPECT_EQ(carried_over("_Open", "Open", "打开(_O)"), "打开");
  EXPECT_EQ(carried_over("_Open", "Open", "Ö_ffnen"), "Öffnen");
  // Moved in the English: the translation's own key stays.
  EXPECT_EQ(carried_over("_Save", "Sa_ve", "_Speichern", &c), "_Speichern");
  // With punctuation: the marker goes before it.
  EXPECT_EQ(carried_over("Open...", "_Open...", "打开..."), "打开(_O)...");
}

TEST(PoRefresh, WordsAreNotCosmetic) {
  RefreshChanges c;
  EXPECT_EQ(carried_over("Open file", "Open folder", "打开文件", &c), "<refused>");
  EXPECT_EQ(c, RefreshChanges{"words"});
  EXPECT_EQ(carried_over("Open File", "Open file", "Datei öffnen"), "<refused>");  // case is a word
}

TEST(PoRefresh, EntriesOfACatalogMsgmergeWrote) {
  const auto catalog = data::PoCatalog::parse(
      "msgid \"\"\nmsgstr \"\"\n\"Content-Type: text/plain; charset=UTF-8\\n\"\n"
      "\"Plural-Forms: nplurals=2; plural=(n != 1);\\n\"\n\n"
      "#, fuzzy\n#| msgid \"Open\"\nmsgid \"Open...\"\nmsgstr \"Öffnen\"\n\n"
      "#, fuzzy, c-format\n#| msgid \"%d file\"\n#| msgid_plural \"%d files\"\n"
      "msgid \"%ld file\"\nmsgid_plural \"%ld files\"\n"
      "msgstr[0] \"%d Datei\"\nmsgstr[1] \"%d Dateien\"\n\n"
      "#, fuzzy\n#| msgctxt \"verb\"\n#| msgid \"Open\"\nmsgctxt \"adjective\"\nmsgid \"Open\"\n"
      "msgstr \"Öffnen\"\n\n"
      "#, fuzzy\n#| msgid \"\"\n#| \"Open a \"\n#| \"file\"\nmsgid \"Open a folder\"\nmsgstr "
      "\"Eine Datei "
      "öffnen\"\n\n"
      "msgid \"Close\"\nmsgstr \"Schließen\"\n",
      "de.po");
  const auto& e = catalog.entries();
  ASSERT_EQ(e.size(), 6u);
  EXPECT_EQ(e[1].previous_msgid, "Open");
  auto r = po::refresh(e[1], AcceleratorStyle::Inline);
  ASSERT_TRUE(r);
  EXPECT_TRUE(r->cosmetic);
  EXPECT_EQ(r->msgstr, RefreshChanges{"Öffnen..."});
  EXPECT_EQ(r->similarity, 57);  // 3 insertions over 7 characters

  EXPECT_EQ(e[2].previous_msgid_plural, "%d files");
  r = po::refresh(e[2], AcceleratorStyle::Inline);
  ASSERT_TRUE(r);
  EXPECT_TRUE(r->cosmetic);
  EXPECT_EQ(r->msgstr, (RefreshChanges{"%ld Datei", "%ld Dateien"}));

  EXPECT_TRUE(e[3].previous_has_context);
  EXPECT_EQ(e[3].previous_context, "verb");
  r = po::refresh(e[3], AcceleratorStyle::Inline);
  ASSERT_TRUE(r);
  EXPECT_FALSE(r->cosmetic);
  EXPECT_EQ(r->changes, RefreshChanges{"context"});

  EXPECT_EQ(e[4].previous_msgid, "Open a file");  // continuation lines
  r = po::refresh(e[4], AcceleratorStyle::Inline);
  ASSERT_TRUE(r);
  EXPECT_FALSE(r->cosmetic);
  EXPECT_TRUE(r->msgstr.empty());

  EXPECT_FALSE(po::refresh(e[5], AcceleratorStyle::Inline));  // not fuzzy
}

TEST(PoRefresh, AnEntryClearedOfFuzzyLosesItsFlagAndPreviousMsgidOnly) {
  const std::string text =
      "# a translator's note\n#: src/main.c:12\n#, fuzzy, c-format\n#| msgid \"Open %s\"\n"
      "msgid \"Open %s...\"\nmsgstr \"%s öffnen\"\n\n"
      "#, fuzzy\n#| msgid \"Quit\"\nmsgid \"_Quit\"\nmsgstr \"Beenden\"\n";
  auto catalog = data::PoCatalog::parse(text, "de.po");
  EXPECT_EQ(catalog.write(), text);  // nothing changed: byte for byte
  catalog.fill(0, {"%s öffnen..."}, /*fuzzy=*/false, {"attnkit: carried over"});
  catalog.clear_fuzzy(0);
  catalog.fill(1, {"_Beenden"}, /*fuzzy=*/false);
  catalog.clear_fuzzy(1);
  EXPECT_EQ(catalog.write(),
            "# attnkit: carried over\n# a translator's note\n#: src/main.c:12\n#, c-format\n"
            "msgid \"Open %s...\"\nmsgstr \"%s öffnen...\"\n\n"
            "msgid \"_Quit\"\nmsgstr \"_Beenden\"\n");
}
