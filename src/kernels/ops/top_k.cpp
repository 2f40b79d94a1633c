#include "attnkit/kernels/ops/top_k.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "../cpu/row_parts.h"
#include "../cpu/simd.h"

namespace attnkit::kernels {
namespace {

// log sum_j exp(x[j]) given m = max_j x[j]: a sum of exponentials, none of them stored.
float log_sum_exp(const float* x, int64_t vocab, float m) {
  return m + std::log(simd::exp_sum(x, static_cast<int>(vocab), m));
}

// The `want` largest logits of a row, ascending, the lower token id kept among equal logits at
// the cut (best_extensions' promise): one pass that skips, with a vector compare, the logits
// below the smallest kept once `want` are kept. (A floor from piece maxima, to skip more of the
// row from the start, halved this pass on logits in random order but cost 10 % on a model's:
// a vocabulary numbers its tokens by frequency, so the large logits come early anyway.)
void largest(const float* x, int64_t vocab, int64_t want,
             std::vector<std::pair<float, int64_t>>& top) {
  top.clear();
  float threshold = -std::numeric_limits<float>::infinity();  // the smallest kept, once full
  for (int64_t j = simd::next_above(x, 0, vocab, threshold); j < vocab;
       j = simd::next_above(x, j + 1, vocab, threshold)) {
    if (static_cast<int64_t>(top.size()) == want) top.erase(top.begin());
    // Before the equal ones: among equal logits the latest (the highest token id) goes first.
    top.insert(std::lower_bound(top.begin(), top.end(), std::pair{x[j], j},
                                [](const auto& a, const auto& b) { return a.first < b.first; }),
               {x[j], j});
    if (static_cast<int64_t>(top.size()) == want) threshold = top.front().first;
  }
}

}  // namespace

std::vector<Candidate> best_extensions(const float* logits, int64_t k, int64_t vocab,
                                       const double* beam_scores, int64_t want) {
  std::vector<Candidate> all;
  all.reserve(k * want);
  std::vector<std::pair<float, int64_t>> top;  // ascending by logit, at most `want`
  top.reserve(want);
  for (int64_t i = 0; i < k; ++i) {
    if (beam_scores[i] == -std::numeric_limits<double>::infinity()) continue;
    const float* x = logits + i * vocab;
    largest(x, vocab, want, top);
    // The largest kept is the row's maximum: two passes over the row, not three.
    const float lse =
        log_sum_exp(x, vocab, top.empty() ? simd::max_of(x, vocab) : top.back().first);
    for (const auto& [value, token] : top)
      all.push_back({beam_scores[i] + static_cast<double>(value - lse), i, token});
  }
  std::sort(all.begin(), all.end(), [](const Candidate& a, const Candidate& b) {
    if (a.score != b.score) return a.score > b.score;
    return a.beam != b.beam ? a.beam < b.beam : a.token < b.token;
  });
  if (static_cast<int64_t>(all.size()) > want) all.resize(want);
  return all;
}

std::vector<std::vector<Candidate>> best_extensions(const float* logits, int64_t sentences,
                                                    int64_t k, int64_t vocab,
                                                    const double* beam_scores, int64_t want) {
  std::vector<std::vector<Candidate>> best(sentences);
  for_each_row_block(sentences, k * vocab, [&](int64_t from, int64_t to) {
    for (int64_t s = from; s < to; ++s)
      best[s] = best_extensions(logits + s * k * vocab, k, vocab, beam_scores + s * k, want);
  });
  return best;
}

BestToken best_token(const float* logits, int64_t vocab) {
  const int64_t token = std::max_element(logits, logits + vocab) - logits;
  return {token, logits[token] - log_sum_exp(logits, vocab, logits[token])};
}

}  // namespace attnkit::kernels
