// BLEU and chrF against the values in sacreBLEU's own test suite
// (tests/golden/sacrebleu_cases.json), the zh and 13a tokenizers, and AER.

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <tuple>

#include "attnkit/core/error.h"
#include "attnkit/eval/metrics.h"
#include "testing.h"

namespace attnkit::eval {
namespace {

nlohmann::json cases() {
  std::ifstream in(testing::golden_path("sacrebleu_cases.json"));
  return nlohmann::json::parse(in);
}

TEST(Bleu, MatchesSacreBleu) {
  // cases() is a temporary: iterating its member directly would read it after it is gone
  // (make test-sanitize: heap-use-after-free).
  const auto all = cases();
  for (const auto& c : all["bleu"]) {
    BleuOptions o;
    o.tokenize = c["tokenize"];
    o.smooth = c["smooth"];
    o.smooth_value = c.value("smooth_value", 0.1);
    o.effective_order = c.value("effective_order", false);
    auto score = corpus_bleu(c["hyps"].get<std::vector<std::string>>(),
                             c["refs"].get<std::vector<std::vector<std::string>>>(), o);
    EXPECT_NEAR(score.score, c["expected"].get<double>(), 1e-6) << c.dump();
  }
}

TEST(Bleu, StatisticsAndFormat) {
  auto s =
      corpus_bleu({"am I am a character sequence"}, {{"I am a symbol string sequence a a"}}, [] {
        BleuOptions o;
        o.tokenize = "none";
        return o;
      }());
  EXPECT_EQ(s.counts, (std::array<long, 4>{4, 2, 1, 0}));
  EXPECT_EQ(s.totals, (std::array<long, 4>{6, 5, 4, 3}));
  EXPECT_EQ(s.format().rfind("BLEU = ", 0), 0u);
}

TEST(Bleu, MismatchedStreamsAreAnError) { EXPECT_THROW(corpus_bleu({"a", "b"}, {{"a"}}), Error); }

TEST(Chrf, MatchesSacreBleu) {
  const auto all = cases();
  for (const auto& c : all["chrf"]) {
    ChrfOptions o;
    o.beta = c["beta"];
    o.eps_smoothing = c["eps"];
    o.whitespace = c.value("whitespace", false);
    const double score = corpus_chrf(c["hyps"].get<std::vector<std::string>>(),
                                     c["refs"].get<std::vector<std::string>>(), o);
    EXPECT_NEAR(score, c["expected"].get<double>(), 1e-4) << c.dump();
  }
}

TEST(Tokenizers, Thirteen_a) {
  EXPECT_EQ(tokenize_13a("It wasn't surprising."), "It wasn't surprising .");  // ' is not split
  EXPECT_EQ(tokenize_13a("Pi is 3.14, or 3,14; 1990-2000 &amp; \"quotes\""),
            "Pi is 3.14 , or 3,14 ; 1990 - 2000 & \" quotes \"");
}

TEST(Tokenizers, ChineseSplitsHanAndFullWidthThenApplies13a) {
  EXPECT_EQ(tokenize_zh("我爱Python 3.8, 你呢?"), "我 爱 Python 3.8 , 你 呢 ?");
  EXPECT_EQ(tokenize_zh(" 打开文件（%s）。"), "打 开 文 件 （ % s ） 。");
}

TEST(Alignment, ErrorRate) {
  Alignment sure = {{0, 0}, {1, 1}}, possible = {{0, 0}, {1, 1}, {2, 1}};
  EXPECT_DOUBLE_EQ(alignment_error_rate({{0, 0}, {1, 1}}, sure, possible), 0.0);
  EXPECT_DOUBLE_EQ(alignment_error_rate({{0, 1}, {1, 0}}, sure, possible), 1.0);
  // A = {(0,0), (2,1)}: |A∩S| = 1, |A∩P| = 2 -> 1 - 3/4.
  EXPECT_DOUBLE_EQ(alignment_error_rate({{0, 0}, {2, 1}}, sure, possible), 0.25);
}

// Shifts "within the run" whose end lies past the hypothesis's end: Python's slices stop at the
// end, and an unclamped end ran past it (found by tests/fuzz/fuzz_metrics, ASan). Edits and
// reference lengths from sacreBLEU 2.6.0's lib_ter.translation_edit_rate on the same words.
TEST(Ter, ShiftsThatReachTheEndMatchSacreBleu) {
  const std::vector<std::tuple<std::string, std::string, int64_t, int64_t>> cases = {
      {"c c a b a b", "b a b b", 3, 4},
      {"c c c b a", "b a a", 4, 3},
      {"b c b c c", "c c c b", 2, 4},
      {"a c c b c", "b c b c a c", 2, 6},
      {"b c c a a", "a b b a a b", 4, 6}};
  auto words = [](const std::string& s) {
    std::vector<std::string> out;
    std::istringstream in(s);
    for (std::string w; in >> w;) out.push_back(w);
    return out;
  };
  for (const auto& [hyp, ref, edits, length] : cases)
    EXPECT_EQ(translation_edits(words(hyp), words(ref)), std::make_pair(edits, length))
        << hyp << " | " << ref;
}

}  // namespace
}  // namespace attnkit::eval
