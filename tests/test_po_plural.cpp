// Plural-Forms headers (include/attnkit/data/plural_forms.h): the forms gettext's own languages
// pick for each n, and the headers msgfmt --check refuses, refused here too with what is wrong.
#include <gtest/gtest.h>

#include <string>

#include "attnkit/core/error.h"
#include "attnkit/data/plural_forms.h"

using attnkit::Error;
using attnkit::data::PluralForms;

namespace {

std::string error_of(const std::string& header) {
  try {
    PluralForms::parse(header);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(PoPlural, FormsOfTheLanguagesOwnRules) {
  const auto de = PluralForms::parse("nplurals=2; plural=(n != 1);");
  EXPECT_EQ(de.nplurals(), 2);
  EXPECT_EQ(de.form(1), 0);
  EXPECT_EQ(de.form(0), 1);
  EXPECT_EQ(de.form(2), 1);
  EXPECT_TRUE(de.only_one_number(0));
  EXPECT_FALSE(de.only_one_number(1));

  const auto ru = PluralForms::parse(
      "nplurals=3; plural=(n%10==1 && n%100!=11 ? 0 : n%10>=2 && n%10<=4 && (n%100<10 || "
      "n%100>=20) ? 1 : 2);");
  EXPECT_EQ(ru.numbers_of(0, 4), (std::vector<uint64_t>{1, 21, 31, 41}));
  EXPECT_EQ(ru.numbers_of(1, 4), (std::vector<uint64_t>{2, 3, 4, 22}));
  EXPECT_EQ(ru.numbers_of(2, 4), (std::vector<uint64_t>{0, 5, 6, 7}));
  EXPECT_EQ(ru.form(111), 2);
  EXPECT_EQ(ru.form(1001), 0);          // past the table: the expression itself
  EXPECT_FALSE(ru.only_one_number(0));  // 1, 21, 31, ...: the number must stay in the form

  const auto ar = PluralForms::parse(
      "nplurals=6; plural=n==0 ? 0 : n==1 ? 1 : n==2 ? 2 : n%100>=3 && n%100<=10 ? 3 : "
      "n%100>=11 ? 4 : 5;");
  EXPECT_EQ(ar.form(0), 0);
  EXPECT_EQ(ar.form(2), 2);
  EXPECT_EQ(ar.form(7), 3);
  EXPECT_EQ(ar.form(11), 4);
  EXPECT_EQ(ar.form(100), 5);
  const auto fr = PluralForms::parse("nplurals=2; plural=(n > 1)");  // no trailing ';'
  EXPECT_EQ(fr.form(0), 0);
  EXPECT_EQ(fr.numbers_of(0, 8), (std::vector<uint64_t>{0, 1}));
  const auto zh = PluralForms::parse("nplurals=1; plural=0;");
  EXPECT_EQ(zh.form(5), 0);
  EXPECT_TRUE(PluralForms::parse(" nplurals = 2 ; plural = !(n==1) ;").form(1) == 0);
}

TEST(PoPlural, HeadersMsgfmtRefusesAreRefusedWithTheReason) {
  EXPECT_NE(error_of("plural=(n != 1);").find("no nplurals"), std::string::npos);
  EXPECT_NE(error_of("nplurals=0; plural=0;").find("outside 1..32"), std::string::npos);
  EXPECT_NE(error_of("nplurals=-1; plural=0;").find("outside 1..32"), std::string::npos);
  EXPECT_NE(error_of("nplurals=3000000; plural=0;").find("outside 1..32"), std::string::npos);
  EXPECT_NE(error_of("nplurals=x; plural=0;").find("is not a number"), std::string::npos);
  EXPECT_NE(error_of("nplurals=2;").find("no plural expression"), std::string::npos);
  EXPECT_NE(error_of("nplurals=2; plural=(n%0);").find("divides by zero for n = 0"),
            std::string::npos);
  EXPECT_NE(error_of("nplurals=2; plural=n;").find("gives form 2 for n = 2"), std::string::npos);
  EXPECT_NE(error_of("nplurals=2; plural=(n != 1;").find("')' expected"), std::string::npos);
  EXPECT_NE(error_of("nplurals=2; plural=n ? 1;").find("without ':'"), std::string::npos);
  EXPECT_NE(error_of("nplurals=2; plural=x;").find("unexpected 'x'"), std::string::npos);
  // 100,000 parentheses: refused before the parser's recursion could run out of stack.
  const std::string deep =
      "nplurals=2; plural=" + std::string(100000, '(') + "n != 1" + std::string(100000, ')') + ";";
  EXPECT_NE(error_of(deep).find("nested more than 64 deep"), std::string::npos);
  const std::string bangs = "nplurals=2; plural=" + std::string(100000, '!') + "n;";
  EXPECT_NE(error_of(bangs).find("nested more than 64 deep"), std::string::npos);
}
