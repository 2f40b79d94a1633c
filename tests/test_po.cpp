// The gettext catalog as translators' tools see it (include/attnkit/data/po_catalog.h): parsed in
// full, written back byte for byte where nothing changed, errors naming file:line.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "attnkit/core/error.h"
#include "attnkit/data/po_catalog.h"
#include "data/charset.h"
#include "testing.h"

using namespace attnkit;
using data::PoCatalog;

namespace {

std::string sample(const std::string& name) {
  return std::string(ATTNKIT_TEST_DATA_DIR) + "/" + name;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string error_of(const std::string& text) {
  try {
    PoCatalog::parse(text, "t.po");
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST(PoCatalog, ParsesEveryPartOfAPot) {
  const auto c = PoCatalog::read(sample("catalog.pot"));
  const auto& e = c.entries();
  ASSERT_EQ(e.size(), 10u);
  EXPECT_TRUE(e[0].is_header());
  EXPECT_TRUE(e[0].fuzzy());
  EXPECT_EQ(c.header_field("Plural-Forms"), "nplurals=INTEGER; plural=EXPRESSION;");
  EXPECT_EQ(c.nplurals(), 0);
  EXPECT_EQ(c.charset(), "UTF-8");  // "CHARSET" reads as UTF-8
  EXPECT_EQ(e[1].msgid, "Open the file");
  EXPECT_EQ(e[1].line, 21u);
  EXPECT_TRUE(e[2].has_flag("c-format"));
  EXPECT_TRUE(e[3].has_context);
  EXPECT_EQ(e[3].context, "menu");
  EXPECT_EQ(e[3].msgid, "_Save As…");
  EXPECT_EQ(e[4].msgid_plural, "%d files were copied");
  EXPECT_EQ(e[4].msgstr.size(), 2u);
  EXPECT_EQ(e[5].msgid,
            "Usage: attnkit-test [OPTION]... FILE\nTranslate FILE.\n\n  --help     display this "
            "help and exit\n");
  EXPECT_TRUE(e[6].fuzzy());
  EXPECT_EQ(e[7].msgid, "<b>Warning:</b> see <a href=\"https://example.org/help\">the manual</a>");
  EXPECT_TRUE(e[9].obsolete);
  EXPECT_EQ(e[9].msgstr[0], "一条旧消息");
  for (size_t i = 1; i < 9; ++i) EXPECT_FALSE(e[i].translated()) << i;
}

TEST(PoCatalog, UnchangedCatalogsWriteBackByteForByte) {
  const std::string pot = slurp(sample("catalog.pot"));
  EXPECT_EQ(PoCatalog::parse(pot, "catalog.pot").write(), pot);
  const std::string po = slurp(sample("sample.po"));
  EXPECT_EQ(PoCatalog::parse(po, "sample.po").write(), po);
  // CRLF line breaks, a byte-order mark, no final line break.
  std::string crlf;
  for (char ch : pot) crlf += ch == '\n' ? std::string("\r\n") : std::string(1, ch);
  crlf = "\xEF\xBB\xBF" + crlf.substr(0, crlf.size() - 2);
  EXPECT_EQ(PoCatalog::parse(crlf, "crlf.pot").write(), crlf);
}

TEST(PoCatalog, FillingChangesOnlyTheFilledEntries) {
  const std::string pot = slurp(sample("catalog.pot"));
  auto c = PoCatalog::parse(pot, "catalog.pot");
  c.fill(1, {"打开文件"}, /*fuzzy=*/true, {"attnkit: machine translation"});
  c.fill(2, {"无法打开 %s：%s"}, /*fuzzy=*/true);
  c.fill(4, {"已复制 %d 个文件"}, /*fuzzy=*/false);
  const std::string out = c.write();
  std::string expected = pot;
  auto replace = [&](const std::string& from, const std::string& to) {
    const auto at = expected.find(from);
    ASSERT_NE(at, std::string::npos) << from;
    expected.replace(at, from.size(), to);
  };
  replace(
      "#. TRANSLATORS: the window's title\n#: src/main.c:10 src/main.c:20\n"
      "msgid \"Open the file\"\nmsgstr \"\"\n",
      "# attnkit: machine translation\n#. TRANSLATORS: the window's title\n"
      "#: src/main.c:10 src/main.c:20\n#, fuzzy\nmsgid \"Open the file\"\n"
      "msgstr \"打开文件\"\n");
  replace("#, c-format\nmsgid \"Cannot open %s: %s\"\nmsgstr \"\"\n",
          "#, fuzzy, c-format\nmsgid \"Cannot open %s: %s\"\nmsgstr \"无法打开 %s：%s\"\n");
  replace("msgstr[0] \"\"\nmsgstr[1] \"\"\n", "msgstr[0] \"已复制 %d 个文件\"\n");
  EXPECT_EQ(out, expected);
  // What was written parses to what was filled.
  const auto again = PoCatalog::parse(out, "out.po");
  EXPECT_EQ(again.entries()[1].msgstr[0], "打开文件");
  EXPECT_TRUE(again.entries()[1].fuzzy());
  EXPECT_EQ(again.entries()[1].comments, std::vector<std::string>{"attnkit: machine translation"});
  EXPECT_EQ(again.entries()[4].msgstr.size(), 1u);
}

TEST(PoCatalog, HeaderFieldsAreSetInPlaceOrAppended) {
  auto c = PoCatalog::read(sample("catalog.pot"));
  c.set_header_field("Language", "zh_CN");
  c.set_header_field("Plural-Forms", "nplurals=1; plural=0;");
  c.set_header_field("X-Generator", "attnkit");
  const auto again = PoCatalog::parse(c.write(), "out.po");
  EXPECT_EQ(again.header_field("Language"), "zh_CN");
  EXPECT_EQ(again.nplurals(), 1);
  EXPECT_EQ(again.header_field("X-Generator"), "attnkit");
  EXPECT_EQ(again.header_field("Project-Id-Version"), "attnkit-test 1.0");
}

TEST(PoCatalog, LongAndMultiLineStringsWrapAsGettextDoes) {
  EXPECT_EQ(data::render_po_keyword("msgstr", "短"), "msgstr \"短\"\n");
  EXPECT_EQ(data::render_po_keyword("msgstr", "a\nb\n"), "msgstr \"\"\n\"a\\n\"\n\"b\\n\"\n");
  EXPECT_EQ(data::render_po_keyword("msgstr", "say \"hi\"\t\\"),
            "msgstr \"say \\\"hi\\\"\\t\\\\\"\n");
  // 60 CJK characters are 120 columns: two lines of at most 77 between the quotes.
  std::string cjk;
  for (int i = 0; i < 60; ++i) cjk += "译";
  const std::string out = data::render_po_keyword("msgstr", cjk);
  std::istringstream lines(out);
  std::string line, joined;
  std::getline(lines, line);
  EXPECT_EQ(line, "msgstr \"\"");
  int n = 0;
  while (std::getline(lines, line)) {
    EXPECT_LE(line.size() / 3 * 2, 79u);
    joined += line.substr(1, line.size() - 2);
    ++n;
  }
  EXPECT_EQ(n, 2);
  EXPECT_EQ(joined, cjk);
  // Whatever it renders parses back to the same string.
  for (const std::string s :
       {cjk, std::string(200, 'x'), std::string("a b ") + std::string(100, 'y'),
        std::string("tail\\"), std::string("x\\n not a newline \\\\n\n")}) {
    const auto c = PoCatalog::parse("msgid \"k\"\n" + data::render_po_keyword("msgstr", s), "r.po");
    EXPECT_EQ(c.entries()[0].msgstr[0], s);
  }
}

TEST(PoCatalog, OtherCharsetsAreReadAndWrittenBackInThem) {
  const std::string utf8 =
      "msgid \"\"\nmsgstr \"Content-Type: text/plain; charset=GB2312\\n\"\n\n"
      "msgid \"File\"\nmsgstr \"文件\"\n\nmsgid \"Edit\"\nmsgstr \"\"\n";
  const std::string gb = data::from_utf8(utf8, "GB2312", "t");
  ASSERT_NE(gb, utf8);
  auto c = PoCatalog::parse(gb, "gb.po");
  EXPECT_EQ(c.charset(), "GB2312");
  EXPECT_EQ(c.entries()[1].msgstr[0], "文件");
  EXPECT_EQ(c.write(), gb);
  c.fill(2, {"编辑"}, /*fuzzy=*/true);
  EXPECT_EQ(data::to_utf8(c.write(), "GB2312", "t"),
            "msgid \"\"\nmsgstr \"Content-Type: text/plain; charset=GB2312\\n\"\n\n"
            "msgid \"File\"\nmsgstr \"文件\"\n\n#, fuzzy\nmsgid \"Edit\"\nmsgstr \"编辑\"\n");

  const std::string latin1 = data::from_utf8(
      "msgid \"\"\nmsgstr \"Content-Type: text/plain; charset=ISO-8859-1\\n\"\n\n"
      "msgid \"Caf\xC3\xA9\"\nmsgstr \"\"\n",
      "ISO-8859-1", "t");
  auto l = PoCatalog::parse(latin1, "latin1.po");
  EXPECT_EQ(l.entries()[1].msgid, "Caf\xC3\xA9");
  EXPECT_EQ(l.write(), latin1);
  l.fill(1, {"咖啡馆"}, /*fuzzy=*/true);
  try {
    l.write();
    FAIL() << "Chinese written in ISO-8859-1";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("latin1.po:4: the translation cannot be written in the "
                                         "file's charset ISO-8859-1"),
              std::string::npos)
        << e.what();
  }
}

TEST(PoCatalog, MalformedFilesAreErrorsNamingFileAndLine) {
  EXPECT_NE(error_of("msgid \"a\"\nmsgstr \"b\n").find("t.po:2: unterminated string"),
            std::string::npos);
  EXPECT_NE(error_of("msgstr \"b\"\n").find("t.po:1: msgstr without msgid"), std::string::npos);
  EXPECT_NE(error_of("msgid \"a\\q\"\nmsgstr \"\"\n").find("t.po:1: bad escape '\\q'"),
            std::string::npos);
  EXPECT_NE(error_of("msgid \"a\"\nmsgstr \"\"\n\nmsgid \"b\"\nmsgstr \"\"\n\nmsgid \"a\"\n"
                     "msgstr \"x\"\n")
                .find("t.po:7: duplicate message definition (first at line 1)"),
            std::string::npos);
  EXPECT_NE(
      error_of("msgid \"a\"\n\nmsgid \"b\"\nmsgstr \"\"\n").find("t.po:1: msgid without msgstr"),
      std::string::npos);
  EXPECT_NE(error_of("msgid \"a\"\nmsgstr \"\"\n\"x\" y\n").find("t.po:3: unexpected text"),
            std::string::npos);
  EXPECT_NE(error_of("msgid \"a\"\nmsgid_plural \"as\"\nmsgstr \"\"\n")
                .find("t.po:3: a plural entry needs msgstr[N]"),
            std::string::npos);
  EXPECT_NE(
      error_of("msgid \"a\"\nmsgstr \"\"\nbogus \"c\"\n").find("t.po:3: unknown keyword 'bogus'"),
      std::string::npos);
  // The same message in another context, or obsolete, is not a duplicate.
  EXPECT_EQ(error_of("msgid \"a\"\nmsgstr \"\"\n\nmsgctxt \"c\"\nmsgid \"a\"\nmsgstr \"\"\n\n"
                     "#~ msgid \"a\"\n#~ msgstr \"x\"\n"),
            "(no error)");
}

// What msgfmt --check refuses, refused on reading with the line: a header whose Plural-Forms
// cannot be evaluated, an entry with only a msgctxt, bytes outside a declared ASCII.
TEST(PoCatalog, CatalogsMsgfmtRefusesAreRefusedWithTheLine) {
  const std::string head =
      "msgid \"\"\nmsgstr \"\"\n\"Content-Type: text/plain; charset=UTF-8\\n\"\n";
  auto error = [](const std::string& text) {
    try {
      PoCatalog::parse(text, "t.po");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  for (const char* forms : {"nplurals=0; plural=0;", "nplurals=-1; plural=0;",
                            "nplurals=3000000; plural=0;", "nplurals=2; plural=(n%0);"}) {
    const auto e = error(head + "\"Plural-Forms: " + forms + "\\n\"\n");
    EXPECT_EQ(e.rfind("t.po:4: Plural-Forms", 0), 0u) << forms << ": " << e;
  }
  const std::string deep =
      "nplurals=2; plural=" + std::string(100000, '(') + "n" + std::string(100000, ')') + ";";
  EXPECT_NE(error(head + "\"Plural-Forms: " + deep + "\\n\"\n").find("nested more than 64"),
            std::string::npos);
  EXPECT_EQ(error(head + "\nmsgctxt \"menu\"\n"), "t.po:5: msgctxt without msgid");
  const auto ascii = error(
      "msgid \"\"\nmsgstr \"Content-Type: text/plain; charset=ASCII\\n\"\n\nmsgid \"a\"\nmsgstr "
      "\"\xc3\xa9\"\n");
  EXPECT_EQ(ascii, "t.po:5: a byte outside ASCII, the declared charset");
  EXPECT_EQ(error(head + "\"Plural-Forms: nplurals=INTEGER; plural=EXPRESSION;\\n\"\n"), "");
  // As msgfmt: a misspelt nplurals matters only to a catalog with plural forms.
  const std::string misspelt = head + "\"Plural-Forms: nulurals=1; plural=0;\\n\"\n";
  EXPECT_EQ(error(misspelt + "\nmsgid \"a\"\nmsgstr \"b\"\n"), "");
  EXPECT_EQ(error(misspelt + "\nmsgid \"a\"\nmsgid_plural \"as\"\nmsgstr[0] \"b\"\n"),
            "t.po:4: Plural-Forms has no nplurals");
}
