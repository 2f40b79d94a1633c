// The search's options beyond the beam (decoding::SearchOptions: repetition, n-gram ban and
// coverage penalties, sampling, a target prefix) on a scripted decoder whose next-token logits
// and attention depend only on the token it is fed, so that every outcome below follows by hand
// from the tables.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <map>
#include <set>

#include "attnkit/data/vocab.h"
#include "attnkit/decoding/search.h"

using namespace attnkit;
using data::Vocab;
using decoding::SearchOptions;

namespace {

constexpr int64_t kTokenA = 4, kTokenB = 5, kTokenC = 6, kScriptedVocab = 8;

// logits[fed token] and attention[fed token] over a source of `S` tokens.
class ScriptedDecoder : public decoding::StepDecoder {
 public:
  ScriptedDecoder(std::map<int64_t, std::map<int64_t, float>> logits,
                  std::map<int64_t, std::vector<float>> attention, int64_t source)
      : logits_(std::move(logits)), attention_(std::move(attention)), source_(source) {}

  Step step(const at::Tensor& tokens) override {
    const int64_t n = tokens.size(0);
    Step s{at::zeros({n, kScriptedVocab}), at::zeros({n, source_})};
    for (int64_t i = 0; i < n; ++i) {
      const int64_t fed = tokens[i].item<int64_t>();
      for (const auto& [token, logit] : logits_[fed]) s.logits[i][token] = logit;
      auto it = attention_.find(fed);
      for (int64_t j = 0; j < source_; ++j)
        s.attention[i][j] = it == attention_.end() ? 1.0f / source_ : it->second[j];
    }
    return s;
  }
  void reorder(const at::Tensor&, const at::Tensor&, int64_t) override {}

 private:
  std::map<int64_t, std::map<int64_t, float>> logits_;
  std::map<int64_t, std::vector<float>> attention_;
  int64_t source_;
};

// <s> -> a; a -> b (or c, or the end); b -> a (or the end); c -> the end: unpenalised, a
// greedy search writes "a b a b a b" up to the length limit.
ScriptedDecoder looping_decoder() {
  return ScriptedDecoder({{Vocab::kSos, {{kTokenA, 5}}},
                          {kTokenA, {{kTokenB, 5}, {kTokenC, 3}, {Vocab::kEos, 1}}},
                          {kTokenB, {{kTokenA, 5}, {Vocab::kEos, 2}}},
                          {kTokenC, {{Vocab::kEos, 5}}}},
                         {}, 3);
}

std::vector<int64_t> best_tokens(decoding::StepDecoder& decoder, const SearchOptions& o) {
  return decoding::search(decoder, at::full({1}, 3, at::kLong), o)[0][0].tokens;
}

SearchOptions limited_search(int64_t beam) {
  SearchOptions o;
  o.beam_size = beam;
  o.max_length_ratio = 1;
  o.max_length_extra = 3;  // at most 6 tokens
  return o;
}

bool repeats_a_bigram(const std::vector<int64_t>& t) {
  std::set<std::pair<int64_t, int64_t>> seen;
  for (size_t i = 1; i < t.size(); ++i)
    if (!seen.insert({t[i - 1], t[i]}).second) return true;
  return false;
}

using PenaltyTokens = std::vector<int64_t>;

}  // namespace

TEST(SearchPenalties, NoneByDefault) {
  auto d = looping_decoder();
  EXPECT_EQ(best_tokens(d, limited_search(1)),
            (PenaltyTokens{kTokenA, kTokenB, kTokenA, kTokenB, kTokenA, kTokenB}));
}

TEST(SearchPenalties, NoRepeatedNgram) {
  auto o = limited_search(1);
  o.no_repeat_ngram = 2;
  auto d = looping_decoder();
  // <s> a b a, then "a b" again is banned: c, then the end.
  EXPECT_EQ(best_tokens(d, o), (PenaltyTokens{kTokenA, kTokenB, kTokenA, kTokenC}));
  o.no_repeat_ngram = 1;  // no token twice: after "a b", a is banned and the end wins
  EXPECT_EQ(best_tokens(d, o), (PenaltyTokens{kTokenA, kTokenB}));
  // Beam search: no hypothesis it returns repeats a bigram.
  o = limited_search(6);
  o.nbest = 6;
  o.no_repeat_ngram = 2;
  const auto found = decoding::search(d, at::full({1}, 3, at::kLong), o)[0];
  EXPECT_EQ(found.size(), 6u);
  EXPECT_FALSE(std::any_of(found.begin(), found.end(), [](const decoding::Hypothesis& h) {
    return repeats_a_bigram(h.tokens);
  }));
}

TEST(SearchPenalties, RepetitionPenalty) {
  auto o = limited_search(1);
  auto d = looping_decoder();
  o.repetition_penalty = 2;  // b -> a: 5 / 2 = 2.5 still beats the end's 2; a -> b: 2.5 < c's 3
  EXPECT_EQ(best_tokens(d, o), (PenaltyTokens{kTokenA, kTokenB, kTokenA, kTokenC}));
  o.repetition_penalty = 3;  // b -> a: 5 / 3 < 2: the end
  EXPECT_EQ(best_tokens(d, o), (PenaltyTokens{kTokenA, kTokenB}));
}

TEST(SearchPenalties, CoveragePenaltyPrefersTheHypothesisThatReadsEverySourceToken) {
  // <s> -> a (5) or c (4.9), each then the end. The step fed <s> attends to source token 0; the
  // one fed a attends to 0 again, the one fed c to token 1. Unpenalised, a wins by its logit;
  // with coverage, c, which attended to both tokens.
  ScriptedDecoder d({{Vocab::kSos, {{kTokenA, 5}, {kTokenC, 4.9f}}},
                     {kTokenA, {{Vocab::kEos, 5}}},
                     {kTokenC, {{Vocab::kEos, 5}}}},
                    {{Vocab::kSos, {1, 0}}, {kTokenA, {1, 0}}, {kTokenC, {0, 1}}}, 2);
  SearchOptions o;
  o.beam_size = 2;
  o.nbest = 2;
  const auto lengths = at::full({1}, 2, at::kLong);
  const auto plain = decoding::search(d, lengths, o)[0];
  EXPECT_EQ(plain[0].tokens, PenaltyTokens{kTokenA});
  o.coverage_penalty = 0.2;
  const auto covered = decoding::search(d, lengths, o)[0];
  ASSERT_EQ(covered.size(), 2u);
  EXPECT_EQ(covered[0].tokens, PenaltyTokens{kTokenC});
  // a's score lost 0.2 x log(0.001) for the token it never attended to; c's lost nothing.
  EXPECT_NEAR(covered[0].score, plain[1].score, 1e-6);
  EXPECT_NEAR(covered[1].score, plain[0].score + 0.2 * std::log(1e-3), 1e-5);
}

namespace {

// <s> -> a (2.2), b (2), c (1.8), the rest 0; each of them -> the end (20: nothing else is
// ever drawn there).
ScriptedDecoder three_way() {
  return ScriptedDecoder({{Vocab::kSos, {{kTokenA, 2.2f}, {kTokenB, 2}, {kTokenC, 1.8f}}},
                          {kTokenA, {{Vocab::kEos, 20}}},
                          {kTokenB, {{Vocab::kEos, 20}}},
                          {kTokenC, {{Vocab::kEos, 20}}}},
                         {}, 3);
}

// The first token of each of `n` sentences, sampled in one batch (the end when it is the first).
PenaltyTokens first_tokens(const SearchOptions& o, int64_t n) {
  auto d = three_way();
  PenaltyTokens out;
  for (const auto& s : decoding::search(d, at::full({n}, 3, at::kLong), o))
    out.push_back(s[0].tokens.empty() ? Vocab::kEos : s[0].tokens[0]);
  return out;
}

}  // namespace

TEST(SearchSampling, SeededTopKTopPAndTemperature) {
  SearchOptions o;
  o.beam_size = 1;
  o.sampling_topk = 0;  // the whole vocabulary
  o.seed = 7;
  const auto drawn = first_tokens(o, 40);
  EXPECT_EQ(first_tokens(o, 40), drawn);  // the same seed, the same draws
  o.seed = 8;
  EXPECT_NE(first_tokens(o, 40), drawn);
  EXPECT_GE(std::set<int64_t>(drawn.begin(), drawn.end()).size(), 3u);
  o.sampling_topk = 3;  // only a, b and c, each drawn
  const auto top3 = first_tokens(o, 40);
  EXPECT_EQ(std::set<int64_t>(top3.begin(), top3.end()),
            (std::set<int64_t>{kTokenA, kTokenB, kTokenC}));
  o.sampling_topk = 0;
  o.sampling_topp = 0.01;  // the nucleus is the most likely token alone
  EXPECT_EQ(first_tokens(o, 40), PenaltyTokens(40, kTokenA));
  o.sampling_topp = 1;
  o.temperature = 0.01;  // b's weight against a's: exp(-20)
  EXPECT_EQ(first_tokens(o, 40), PenaltyTokens(40, kTokenA));

  // A sampled token scores its probability under the model, not under the temperature.
  o.temperature = 1;
  o.sampling_topk = 3;
  auto d = three_way();
  for (const auto& s : decoding::search(d, at::full({8}, 3, at::kLong), o)) {
    const auto& h = s[0];
    const double lse_first = std::log(std::exp(2.2) + std::exp(2.0) + std::exp(1.8) + 5);
    const std::map<int64_t, double> logit = {{kTokenA, 2.2}, {kTokenB, 2.0}, {kTokenC, 1.8}};
    const double lse_end = std::log(std::exp(20.0) + 7);
    EXPECT_NEAR(h.log_prob, logit.at(h.tokens.at(0)) - lse_first + 20 - lse_end, 1e-5);
  }
}

TEST(SearchPrefix, TheTranslationStartsWithIt) {
  auto d = looping_decoder();
  auto o = limited_search(1);
  o.target_prefix = {{kTokenC}};
  EXPECT_EQ(best_tokens(d, o), PenaltyTokens{kTokenC});  // c, then the end
  o.target_prefix = {{kTokenB, kTokenB}};                // then the loop resumes: b -> a
  EXPECT_EQ(best_tokens(d, o),
            (PenaltyTokens{kTokenB, kTokenB, kTokenA, kTokenB, kTokenA, kTokenB}));
  // The forced tokens' log-probabilities are not counted: c's hypothesis scores its end alone.
  o.target_prefix = {{kTokenC}};
  const auto h = decoding::search(d, at::full({1}, 3, at::kLong), o)[0][0];
  EXPECT_NEAR(h.log_prob, 5 - std::log(std::exp(5.0) + 7), 1e-5);
  // Beam search: every hypothesis it returns starts with the prefix; sentences without one in
  // the same batch search freely.
  o = limited_search(3);
  o.nbest = 3;
  o.target_prefix = {{kTokenC}, {}};
  const auto both = decoding::search(d, at::full({2}, 3, at::kLong), o);
  for (const auto& hyp : both[0]) EXPECT_EQ(hyp.tokens.at(0), kTokenC);
  EXPECT_EQ(both[0][0].tokens, PenaltyTokens{kTokenC});
  o.target_prefix.clear();
  const auto free = decoding::search(d, at::full({1}, 3, at::kLong), o)[0];
  ASSERT_EQ(both[1].size(), free.size());
  for (size_t i = 0; i < free.size(); ++i) EXPECT_EQ(both[1][i].tokens, free[i].tokens);
}
