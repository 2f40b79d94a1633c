// The parts of `attnkit po translate` that need no model (include/attnkit/po/pretranslate.h):
// which memory matches count as exact, which language pairs a model may serve, and what
// `po stats` counts. The model's part is tested end to end in tests/cli/test_po.py.
#include <gtest/gtest.h>

#include <fstream>

#include "attnkit/core/error.h"
#include "attnkit/po/pretranslate.h"
#include "testing.h"

using namespace attnkit;
using data::PoCatalog;

namespace {

const data::PoEntry& find(const PoCatalog& c, const std::string& msgid) {
  for (const auto& e : c.entries())
    if (e.msgid == msgid && !e.is_header()) return e;
  throw std::runtime_error("no entry " + msgid);
}

const char* kHeader =
    "msgid \"\"\nmsgstr \"Content-Type: text/plain; charset=UTF-8\\nPlural-Forms: nplurals=1; "
    "plural=0;\\n\"\n\n";

// A catalog of untranslated entries, one per msgid (no quotes or backslashes in them).
PoCatalog untranslated(const std::vector<std::string>& msgids) {
  std::string po = kHeader;
  for (const auto& id : msgids) po += "msgid \"" + id + "\"\nmsgstr \"\"\n\n";
  return PoCatalog::parse(po, "w.po");
}

}  // namespace

TEST(PoMemory, CompendiumMatchesAreExactOnContextAndMessage) {
  const auto compendium =
      PoCatalog::parse(std::string(kHeader) +
                           "msgid \"Open\"\nmsgstr \"打开\"\n\n"
                           "msgctxt \"menu\"\nmsgid \"Close\"\nmsgstr \"关闭\"\n\n"
                           "#, fuzzy\nmsgid \"Save\"\nmsgstr \"保存\"\n\n"
                           "msgid \"Quit\"\nmsgstr \"\"\n",
                       "c.po");
  po::Memory memory;
  memory.add_catalog(compendium);
  EXPECT_EQ(memory.size(), 2u);  // neither the fuzzy nor the untranslated entry

  const auto wanted = PoCatalog::parse(std::string(kHeader) +
                                           "msgid \"Open\"\nmsgstr \"\"\n\n"
                                           "msgid \"Open \"\nmsgstr \"\"\n\n"
                                           "msgid \"Close\"\nmsgstr \"\"\n\n"
                                           "msgctxt \"menu\"\nmsgid \"Close\"\nmsgstr \"\"\n\n"
                                           "msgid \"Save\"\nmsgstr \"\"\n",
                                       "w.po");
  po::Memory::Match m;
  ASSERT_TRUE(memory.find(find(wanted, "Open"), 1, m));
  EXPECT_EQ(m.msgstr, std::vector<std::string>{"打开"});
  EXPECT_EQ(m.origin, "c.po");
  EXPECT_TRUE(m.exact);
  EXPECT_FALSE(memory.find(find(wanted, "Open "), 1, m));  // exact means exact
  EXPECT_FALSE(memory.find(wanted.entries()[3], 1, m));    // "Close" without context
  ASSERT_TRUE(memory.find(wanted.entries()[4], 1, m));     // "Close" in "menu"
  EXPECT_EQ(m.msgstr[0], "关闭");
  EXPECT_FALSE(memory.find(find(wanted, "Save"), 1, m));  // fuzzy entries are not memory
}

TEST(PoMemory, CorpusMatchesAreLooseAndKeepWhatMustSurvive) {
  const attnkit::testing::ScratchDir dir("po_memory");
  const std::string tsv = (dir / "train.tsv").string();
  std::ofstream(tsv) << "Save As\t另存为\nOpen %s\t打开 %s\nDelete file\t删除\n";
  po::Memory memory;
  EXPECT_EQ(memory.add_corpus(tsv), 3u);

  const auto wanted = untranslated({"_Save  As", "Open %s", "Delete <b>file</b>"});
  po::Memory::Match m;
  // Whitespace squeezed and the accelerator set aside, then put back the Chinese way.
  ASSERT_TRUE(memory.find(find(wanted, "_Save  As"), 1, m));
  EXPECT_EQ(m.msgstr[0], "另存为(_S)");
  EXPECT_FALSE(m.exact);
  EXPECT_EQ(m.origin, tsv);
  ASSERT_TRUE(memory.find(find(wanted, "Open %s"), 1, m));
  EXPECT_EQ(m.msgstr[0], "打开 %s");
  EXPECT_FALSE(memory.find(find(wanted, "Delete <b>file</b>"), 1, m));
  EXPECT_THROW(memory.add_corpus((dir / "missing.tsv").string()), Error);
}

TEST(PoMemory, FuzzyMatchesAreScoredAndKeepWhatMustSurvive) {
  const attnkit::testing::ScratchDir dir("po_fuzzy");
  const std::string tsv = (dir / "train.tsv").string();
  std::ofstream(tsv) << "Open the file\t打开文件\nDelete %d files\t删除 %d 个文件\n"
                        "Print the page\t打印页面\nFind Again\tWeitersuche_n\n";
  po::Memory memory;
  memory.add_corpus(tsv);
  const auto wanted = untranslated({"Open the files", "Delete %s files", "Print the _pages"});
  po::Memory::Match m;
  // Exact matches only unless a threshold is given.
  EXPECT_FALSE(memory.find(find(wanted, "Open the files"), 1, m));
  // One edit in 14 characters: 100 * 13 / 14, rounded down.
  ASSERT_TRUE(memory.find(find(wanted, "Open the files"), 1, m, po::AcceleratorStyle::Appended,
                          /*fuzzy_threshold=*/75));
  EXPECT_EQ(m.score, 92);
  EXPECT_EQ(m.source, "Open the file");
  EXPECT_EQ(m.msgstr[0], "打开文件");
  EXPECT_FALSE(m.exact);
  EXPECT_FALSE(memory.find(find(wanted, "Open the files"), 1, m, po::AcceleratorStyle::Appended,
                           /*fuzzy_threshold=*/93));
  // A match whose translation lacks the msgid's placeholder is no match ("%d" for "%s").
  EXPECT_FALSE(memory.find(find(wanted, "Delete %s files"), 1, m, po::AcceleratorStyle::Appended,
                           /*fuzzy_threshold=*/75));
  // The accelerator is set aside for the similarity (15 of "Print the pages") and put back.
  ASSERT_TRUE(memory.find(find(wanted, "Print the _pages"), 1, m, po::AcceleratorStyle::Appended,
                          /*fuzzy_threshold=*/75));
  EXPECT_EQ(m.score, 93);
  EXPECT_EQ(m.msgstr[0], "打印页面(_P)");
  // A pair that kept its translator's marker gets no second one.
  const auto label = untranslated({"Find _Again"});
  ASSERT_TRUE(memory.find(find(label, "Find _Again"), 1, m, po::AcceleratorStyle::Inline));
  EXPECT_EQ(m.msgstr[0], "Weitersuche_n");
}

TEST(PoLanguage, RegionsMustAgreeWhenBothNameOne) {
  EXPECT_EQ(po::split_language("zh_CN.UTF-8"), (std::pair<std::string, std::string>{"zh", "CN"}));
  EXPECT_EQ(po::split_language("sr@latin"), (std::pair<std::string, std::string>{"sr", ""}));
  EXPECT_EQ(po::split_language("pt-BR"), (std::pair<std::string, std::string>{"pt", "BR"}));
  EXPECT_TRUE(po::language_matches("zh_CN", "zh_CN"));
  EXPECT_TRUE(po::language_matches("zh", "zh_CN"));
  EXPECT_TRUE(po::language_matches("zh_cn", "zh-CN"));
  EXPECT_FALSE(po::language_matches("zh_CN", "zh_TW"));
  EXPECT_FALSE(po::language_matches("zh_CN", "ja"));
  EXPECT_EQ(po::plural_forms("zh_CN"), "nplurals=1; plural=0;");
  EXPECT_EQ(po::plural_forms("fr"), "nplurals=2; plural=(n > 1);");
  EXPECT_EQ(po::plural_forms("xx"), "");
}

TEST(PoStats, CountsStatesSourcesAndDamagedLines) {
  const auto c = PoCatalog::parse(std::string(kHeader) +
                                      "msgid \"a %s\"\nmsgstr \"甲 %s\"\n\n"        // 5
                                      "# attnkit: machine translation\n#, fuzzy\n"  // 8
                                      "msgid \"b %d\"\nmsgstr \"乙\"\n\n"           // 10
                                      "# attnkit: translation memory (c.po)\n"      // 13
                                      "msgid \"c\"\nmsgstr \"丙\"\n\n"              // 14
                                      "msgid \"d\"\nmsgstr \"\"\n\n"                // 17
                                      "#~ msgid \"e\"\n#~ msgstr \"戊\"\n",
                                  "s.po");
  const auto s = po::stats(c);
  EXPECT_EQ(s.translated, 2u);
  EXPECT_EQ(s.fuzzy, 1u);
  EXPECT_EQ(s.untranslated, 1u);
  EXPECT_EQ(s.obsolete, 1u);
  EXPECT_EQ(s.memory, 1u);
  EXPECT_EQ(s.model, 1u);
  EXPECT_EQ(s.checked, 3u);
  EXPECT_EQ(s.survived, 2u);  // "乙" lost the %d
  EXPECT_EQ(s.damaged, std::vector<size_t>{find(c, "b %d").line});
}
