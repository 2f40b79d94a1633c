// attnkit's BLEU and chrF against sacreBLEU 2.6.0's own scores: tests/golden/sacrebleu/ holds
// seven cases (English, mixed case, Chinese, Unicode spaces, short and empty lines, two
// references) with the corpus scores sacreBLEU printed for each set of arguments (scores.jsonl)
// and its sentence-level scores (sentence-*.json): BLEU, chrF, chrF++ and TER. Every figure must
// agree to the 4 decimals sacreBLEU printed (-w 4), and BLEU's hypothesis and reference lengths
// exactly.

#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "attnkit/data/text.h"
#include "attnkit/eval/metrics.h"
#include "testing.h"

namespace attnkit::eval {
namespace {

constexpr double kPrinted = 0.5e-4 + 1e-9;  // half the last printed digit

std::string case_dir(const std::string& name) { return testing::golden_path("sacrebleu/" + name); }

// The lines of a file as sacreBLEU reads them: Python's universal newlines, each line rstripped.
std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in) << path;
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string s = buffer.str();
  std::vector<std::string> lines;
  std::string line;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\n' || s[i] == '\r') {
      if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
      lines.push_back(text::python_rstrip(line));
      line.clear();
    } else {
      line += s[i];
    }
  }
  if (!line.empty()) lines.push_back(text::python_rstrip(line));
  return lines;
}

struct SacrebleuCase {
  std::vector<std::string> hyps;
  std::vector<std::vector<std::string>> refs;  // streams
};

const SacrebleuCase& load(const std::string& name) {
  static std::map<std::string, SacrebleuCase> cases;
  auto it = cases.find(name);
  if (it != cases.end()) return it->second;
  SacrebleuCase c;
  c.hyps = read_lines(case_dir(name) + "/hyp.txt");
  c.refs.push_back(read_lines(case_dir(name) + "/ref.txt"));
  if (std::ifstream(case_dir(name) + "/ref2.txt"))
    c.refs.push_back(read_lines(case_dir(name) + "/ref2.txt"));
  return cases.emplace(name, std::move(c)).first->second;
}

std::vector<nlohmann::json> score_lines() {
  std::ifstream in(case_dir("scores.jsonl"));
  std::vector<nlohmann::json> out;
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  return out;
}

bool has(const std::string& args, const std::string& flag) {
  return (" " + args + " ").find(" " + flag + " ") != std::string::npos;
}

// Calls check(line, args, case) for every corpus score of `metric` (bleu, chrf, ter) under a
// trace naming the case and arguments; returns how many there were.
int for_each_score(const std::string& metric,
                   const std::function<void(const nlohmann::json&, const std::string&,
                                            const SacrebleuCase&)>& check) {
  int checked = 0;
  for (const auto& line : score_lines()) {
    const std::string args = line["args"];
    if (!has(args, metric)) continue;
    SCOPED_TRACE(line["case"].get<std::string>() + ": " + args);
    check(line, args, load(line["case"]));
    ++checked;
  }
  return checked;
}

TEST(SacreBleu, CorpusBleuEqualsItsScoresAndLengths) {
  const int checked = for_each_score("bleu", [](const auto& line, const auto& args, const auto& c) {
    BleuOptions o;
    std::smatch m;
    ASSERT_TRUE(std::regex_search(args, m, std::regex("--tokenize (\\S+)"))) << args;
    o.tokenize = m[1];
    o.lowercase = has(args, "--lowercase");
    const auto b = corpus_bleu(c.hyps, c.refs, o);
    const std::string verbose = line["verbose_score"];
    ASSERT_TRUE(std::regex_search(verbose, m, std::regex("hyp_len = (\\d+) ref_len = (\\d+)")));
    EXPECT_NEAR(b.score, line["score"].template get<double>(), kPrinted);
    EXPECT_EQ(b.sys_len, std::stol(m[1]));
    EXPECT_EQ(b.ref_len, std::stol(m[2]));
  });
  EXPECT_EQ(checked, 42);  // 7 cases x 6 argument sets
}

TEST(SacreBleu, CorpusChrfAndChrfPlusPlusEqualItsScores) {
  const int checked = for_each_score("chrf", [](const auto& line, const auto& args, const auto& c) {
    ChrfOptions o;
    o.lowercase = has(args, "--chrf-lowercase");
    if (has(args, "--chrf-word-order")) o.word_order = 2;
    EXPECT_NEAR(corpus_chrf(c.hyps, c.refs, o), line["score"].template get<double>(), kPrinted);
  });
  EXPECT_EQ(checked, 21);  // 7 cases x chrF, lowercased chrF, chrF++
}

TEST(SacreBleu, SentenceScoresEqualItsScores) {
  int checked = 0;
  for (const char* name :
       {"en", "en-case", "zh", "unicode-space", "short-lines", "empty-hyps", "two-refs"}) {
    const auto& c = load(name);
    for (const char* file : {"sentence-m-bleu-tokenize-13a.json",
                             "sentence-m-bleu-tokenize-zh.json", "sentence-m-chrf.json"}) {
      std::ifstream in(case_dir(name) + "/" + file);
      ASSERT_TRUE(in) << name << "/" << file;
      const auto golden = nlohmann::json::parse(in);
      const auto& scores = golden["scores"];
      ASSERT_EQ(scores.size(), c.hyps.size()) << name << "/" << file;
      const std::string args = golden["args"];
      for (size_t i = 0; i < c.hyps.size(); ++i) {
        std::vector<std::string> refs;
        for (const auto& stream : c.refs) refs.push_back(stream[i]);
        double ours;
        if (has(args, "chrf")) {
          ours = sentence_chrf(c.hyps[i], refs);
        } else {
          BleuOptions o;
          o.tokenize = has(args, "zh") ? "zh" : "13a";
          ours = sentence_bleu(c.hyps[i], refs, o).score;
        }
        EXPECT_NEAR(ours, scores[i].get<double>(), kPrinted)
            << name << "/" << file << " line " << i + 1 << ": " << c.hyps[i];
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 3 * 1500);
}

TEST(SacreBleu, CorpusTerEqualsItsScores) {
  const int checked = for_each_score("ter", [](const auto& line, const auto&, const auto& c) {
    EXPECT_NEAR(corpus_ter(c.hyps, c.refs).score, line["score"].template get<double>(), kPrinted);
  });
  EXPECT_EQ(checked, 7);
}

// Shifts: a moved run costs one edit, not two per word.
TEST(SacreBleu, TerCountsAShiftAsOneEdit) {
  const std::vector<std::string> ref = {"the", "cat", "sat", "on", "the", "mat"};
  EXPECT_EQ(translation_edits({"on", "the", "mat", "the", "cat", "sat"}, ref),
            (std::pair<int64_t, int64_t>{1, 6}));
  EXPECT_EQ(translation_edits({"the", "cat", "sat", "on", "the", "mat"}, ref),
            (std::pair<int64_t, int64_t>{0, 6}));
  EXPECT_EQ(translation_edits({}, ref), (std::pair<int64_t, int64_t>{6, 6}));
  EXPECT_EQ(translation_edits({"a", "b"}, {}), (std::pair<int64_t, int64_t>{2, 0}));
}

// The corpus-chrF case that exposed the aggregation: a hypothesis's n-grams of an order its
// reference lacks earn nothing and cost nothing (sacreBLEU chrF2 96.87; summing them gave 91.91).
TEST(SacreBleu, ChrfIgnoresOrdersTheReferenceLacks) {
  EXPECT_NEAR(corpus_chrf({"abc", "abx"}, std::vector<std::string>{"abc", "ab"}), 96.875, 1e-4);
}

}  // namespace
}  // namespace attnkit::eval
