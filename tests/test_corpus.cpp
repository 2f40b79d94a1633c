// Corpus readers on committed samples: CRLF, BOM, a missing tab, invalid UTF-8, empty lines;
// gettext catalogs (.po and both byte orders of .mo); deterministic splits.

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "attnkit/core/error.h"
#include "attnkit/data/corpus.h"
#include "attnkit/data/gettext.h"
#include "attnkit/data/synthetic.h"
#include "testing.h"

namespace attnkit::data {
namespace {

std::string sample(const std::string& name) {
  return std::string(ATTNKIT_TEST_DATA_DIR) + "/" + name;
}

TEST(Tsv, ReadsBomCrlfAndSkipsMalformedLinesWithFileAndLine) {
  ReadReport report;
  auto pairs = read_tsv(sample("sample_crlf_bom.tsv"), {}, &report);
  ASSERT_EQ(pairs.size(), 3u);
  EXPECT_EQ(pairs[0].source, "Hello.");  // BOM gone
  EXPECT_EQ(pairs[0].target, "你好。");
  EXPECT_NE(pairs[0].extra.find("Attribution"), std::string::npos);  // the Tatoeba column
  EXPECT_EQ(pairs[1].target, "Geh.");                                // no trailing \r
  EXPECT_EQ(pairs[2].target, "Dernier.");                            // no final newline
  EXPECT_EQ(report.lines, 9u);
  EXPECT_EQ(report.blank, 2u);
  EXPECT_EQ(report.skipped, 4u);
  ASSERT_EQ(report.problems.size(), 4u);
  const std::string file = sample("sample_crlf_bom.tsv");
  EXPECT_EQ(report.problems[0], file + ":5: no tab between source and target");
  EXPECT_EQ(report.problems[1], file + ":6: invalid UTF-8");
  EXPECT_EQ(report.problems[2], file + ":7: empty source");
  EXPECT_EQ(report.problems[3], file + ":8: empty target");
}

TEST(Tsv, StrictAbortsAtTheFirstMalformedLine) {
  TsvOptions strict;
  strict.strict = true;
  try {
    read_tsv(sample("sample_crlf_bom.tsv"), strict);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("sample_crlf_bom.tsv:5: no tab"), std::string::npos)
        << e.what();
  }
}

TEST(Tsv, ReverseSwapsTheColumns) {
  TsvOptions reverse;
  reverse.reverse = true;
  auto pairs = read_tsv(sample("sample_crlf_bom.tsv"), reverse);
  EXPECT_EQ(pairs[1].source, "Geh.");
  EXPECT_EQ(pairs[1].target, "Go.");
}

TEST(Tsv, MissingFileIsAnError) { EXPECT_THROW(read_tsv("/no/such.tsv"), Error); }

TEST(Corpus, DedupFilterAndDeterministicSplit) {
  std::vector<Pair> pairs;
  for (int i = 0; i < 100; ++i)
    pairs.push_back({"s" + std::to_string(i % 90), "t" + std::to_string(i % 90), ""});
  EXPECT_EQ(dedup(pairs), 10u);
  auto a = split(pairs, 0.1, 0.2, 7), b = split(pairs, 0.1, 0.2, 7), c = split(pairs, 0.1, 0.2, 8);
  EXPECT_EQ(a.valid.size(), 9u);
  EXPECT_EQ(a.test.size(), 18u);
  EXPECT_EQ(a.train.size(), 63u);
  EXPECT_EQ(a.test, b.test);
  EXPECT_NE(a.test, c.test);
  // The split is a fixed function of the seed: pin its first element so a change shows.
  std::vector<size_t> order = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  deterministic_shuffle(order, 42);
  std::vector<size_t> again = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  deterministic_shuffle(again, 42);
  EXPECT_EQ(order, again);
  auto count = [](const std::string& s) { return s.size(); };
  std::vector<Pair> lengths = {{"ab", "cd", ""}, {"abcdef", "x", ""}, {"a", "", ""}};
  EXPECT_EQ(filter_length(lengths, 3, count, count), 2u);
  ASSERT_EQ(lengths.size(), 1u);
  EXPECT_EQ(lengths[0].source, "ab");
}

TEST(Gettext, PoReaderHandlesContextsPluralsContinuationsEscapesAndFuzzy) {
  auto entries = read_po(sample("sample.po"));
  ASSERT_EQ(entries.size(), 10u);  // header included
  EXPECT_EQ(entries[0].msgid, "");
  EXPECT_EQ(entries[2].msgid, "Close");
  EXPECT_TRUE(entries[2].fuzzy);
  EXPECT_FALSE(entries[1].fuzzy);
  EXPECT_EQ(entries[3].context, "menu");
  EXPECT_EQ(entries[4].msgid_plural, "%d files");
  EXPECT_EQ(entries[5].msgid, "A long message on two lines");
  EXPECT_EQ(entries[5].msgstr[0], "一条分两行的长消息");
  EXPECT_EQ(entries[6].msgid, "Quote \"this\"\tand tab");

  GettextReport report;
  auto pairs = pairs_from_catalog(entries, report);
  EXPECT_EQ(report.fuzzy, 1u);
  EXPECT_EQ(report.untranslated, 1u);
  EXPECT_EQ(report.placeholder_mismatch, 1u);
  EXPECT_EQ(report.plural, 1u);
  EXPECT_EQ(report.context, 1u);
  ASSERT_EQ(pairs.size(), 6u);
  EXPECT_EQ(pairs[0].source, "Open the file %s");
  EXPECT_EQ(pairs[0].target, "打开文件 %s");
  EXPECT_EQ(pairs[1].source, "Save");  // mnemonics removed on both sides
  EXPECT_EQ(pairs[1].target, "保存");
  EXPECT_EQ(pairs[2].source, "%d files");  // one form (nplurals=1): it translates the plural
  EXPECT_EQ(pairs[2].target, "%d 个文件");
  EXPECT_EQ(pairs[4].source, "Quote \"this\" and tab");  // whitespace squeezed
  EXPECT_EQ(pairs[5].target, "将 %2$s 复制为 %1$s");     // reordered positional placeholders
}

TEST(Gettext, PoSyntaxErrorNamesFileAndLine) {
  testing::ScratchDir dir("bad_po");
  const auto path = dir / "attnkit_bad.po";
  std::ofstream(path) << "msgid \"a\"\nmsgstr \"b\"\nbogus \"c\"\n";
  try {
    read_po(path.string());
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("attnkit_bad.po:3: unknown keyword 'bogus'"),
              std::string::npos)
        << e.what();
  }
}

// Plural indexes that crashed the reader (msgstr[-1] a segfault, msgstr[x] "stoul", a huge one
// bad_alloc) are errors naming the file and line, as any syntax error.
TEST(Gettext, BadPluralIndexesAreErrorsWithFileAndLine) {
  testing::ScratchDir dir("bad_plural");
  for (const std::string keyword :
       {"msgstr[-1]", "msgstr[x]", "msgstr[99999999999]", "msgstr[]", "msgstr[", "msgstr1]"}) {
    const auto path = dir / "attnkit_plural.po";
    std::ofstream(path) << "msgid \"a\"\nmsgid_plural \"as\"\nmsgstr[0] \"b\"\n"
                        << keyword << " \"c\"\n";
    try {
      read_po(path.string());
      FAIL() << keyword << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("attnkit_plural.po:4: bad keyword '" + keyword + "'"),
                std::string::npos)
          << e.what();
    }
  }
}

// Writes a .mo file like msgfmt does, in either byte order.
void write_mo(const std::string& path,
              const std::vector<std::pair<std::string, std::string>>& messages, bool big_endian) {
  auto u32 = [&](uint32_t v) {
    if (big_endian) v = __builtin_bswap32(v);
    std::string s(4, '\0');
    std::memcpy(s.data(), &v, 4);
    return s;
  };
  const uint32_t n = messages.size(), originals = 28, translations = 28 + 8 * n;
  std::string header =
      u32(0x950412de) + u32(0) + u32(n) + u32(originals) + u32(translations) + u32(0) + u32(0);
  std::string tables, strings;
  uint32_t offset = 28 + 16 * n;
  std::string orig_table, trans_table;
  for (const auto& [id, str] : messages) {
    orig_table += u32(id.size()) + u32(offset + strings.size());
    strings += id + '\0';
  }
  for (const auto& [id, str] : messages) {
    trans_table += u32(str.size()) + u32(offset + strings.size());
    strings += str + '\0';
  }
  std::ofstream(path, std::ios::binary) << header << orig_table << trans_table << strings;
}

TEST(Gettext, MoReaderReadsBothByteOrdersWithContextAndPlural) {
  testing::ScratchDir dir("mo");
  for (bool big : {false, true}) {
    const auto path = (dir / "attnkit_test.mo").string();
    write_mo(path,
             {{"", "Content-Type: text/plain; charset=UTF-8\n"},
              {"menu\x04_Quit", "退出(_Q)"},
              {std::string("%d item\0%d items", 16), std::string("%d 项", 6)},
              {"Hello", "你好"}},
             big);
    auto entries = read_mo(path);
    ASSERT_EQ(entries.size(), 4u);
    EXPECT_EQ(entries[1].context, "menu");
    EXPECT_EQ(entries[1].msgid, "_Quit");
    EXPECT_EQ(entries[2].msgid, "%d item");
    EXPECT_EQ(entries[2].msgid_plural, "%d items");
    EXPECT_EQ(entries[2].msgstr[0], "%d 项");
    GettextReport report;
    auto pairs = pairs_from_catalog(entries, report);
    ASSERT_EQ(pairs.size(), 3u);
    EXPECT_EQ(pairs[0].source, "Quit");
    EXPECT_EQ(pairs[0].target, "退出");
  }
}

TEST(Gettext, CorruptMoIsAClearError) {
  testing::ScratchDir dir("bad_mo");
  const auto path = (dir / "attnkit_bad.mo").string();
  std::ofstream(path, std::ios::binary)
      << std::string("\xde\x12\x04\x95\0\0\0\0\xff\xff\xff\x0f", 12) << std::string(20, '\x7f');
  EXPECT_THROW(read_mo(path), Error);
}

TEST(Synthetic, TasksAndAlignments) {
  auto copy = synthetic_task("copy", 5, 3, 6, 5, 1);
  auto rev = synthetic_task("reverse", 5, 3, 6, 5, 1);
  auto perm = synthetic_task("permute", 5, 4, 4, 5, 1);
  EXPECT_EQ(copy[0].pair.source, copy[0].pair.target);
  EXPECT_EQ(copy[0].pair.source, rev[0].pair.source);  // same seed, same sources
  std::string s = rev[0].pair.source;
  EXPECT_EQ(std::string(s.rbegin(), s.rend()), rev[0].pair.target);
  EXPECT_EQ(format_alignment(perm[0].alignment), "0-1 1-0 2-3 3-2");
  EXPECT_EQ(parse_alignment("0-1 1-0 2-3 3-2"), perm[0].alignment);
  EXPECT_THROW(parse_alignment("0-"), Error);
}

}  // namespace
}  // namespace attnkit::data
