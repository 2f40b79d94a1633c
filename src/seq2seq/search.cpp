#include "attnkit/seq2seq/search.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <optional>

#include "../kernels/simd.h"
#include "attnkit/data/vocab.h"
#include "attnkit/seq2seq/fused_step.h"

namespace attnkit::seq2seq {
namespace {

using data::Vocab;

double normalise(double log_prob, size_t length, double alpha) {
  return alpha == 0 ? log_prob
                    : log_prob / std::pow(static_cast<double>(std::max<size_t>(length, 1)), alpha);
}

std::vector<int64_t> max_lengths(const at::Tensor& lengths, const SearchOptions& o) {
  std::vector<int64_t> out;
  auto l = lengths.to(at::kCPU).to(at::kLong);
  for (int64_t i = 0; i < l.size(0); ++i)
    out.push_back(static_cast<int64_t>(std::ceil(o.max_length_ratio * l[i].item<int64_t>())) +
                  o.max_length_extra);
  return out;
}

// A hypothesis's attention as (step, row) pairs into the steps' weight tensors, copied out
// only when it finishes: no tensor op per token or candidate.
using Trail = std::vector<std::pair<int64_t, int64_t>>;

// The [T, S] attention of a hypothesis from its trail.
at::Tensor gather_attention(const std::vector<at::Tensor>& steps, const Trail& trail) {
  const int64_t S = steps.front().size(1);
  auto out = at::empty({static_cast<int64_t>(trail.size()), S});
  float* o = out.data_ptr<float>();
  for (const auto& [step, row] : trail) {
    const float* src = steps[step].data_ptr<float>() + row * S;
    o = std::copy(src, src + S, o);
  }
  return out;
}

}  // namespace

namespace detail {

std::vector<Candidate> best_extensions(const float* logits, int64_t k, int64_t vocab,
                                       const double* beam_scores, int64_t want,
                                       std::vector<float>& scratch) {
  std::vector<Candidate> all;
  std::vector<std::pair<float, int64_t>> top;  // ascending by logit, at most `want`
  scratch.resize(vocab);
  for (int64_t i = 0; i < k; ++i) {
    if (beam_scores[i] == -std::numeric_limits<double>::infinity()) continue;
    const float* x = logits + i * vocab;
    const float mx = kernels::simd::max_of(x, vocab);
    const float lse =
        mx + std::log(kernels::simd::exp_shift(x, scratch.data(), static_cast<int>(vocab), mx));
    top.clear();
    float threshold = -std::numeric_limits<float>::infinity();  // the smallest kept, once full
    for (int64_t j = kernels::simd::next_above(x, 0, vocab, threshold); j < vocab;
         j = kernels::simd::next_above(x, j + 1, vocab, threshold)) {
      if (static_cast<int64_t>(top.size()) == want) top.erase(top.begin());
      top.insert(std::upper_bound(top.begin(), top.end(), std::pair{x[j], -j},
                                  [](const auto& a, const auto& b) { return a.first < b.first; }),
                 {x[j], j});
      if (static_cast<int64_t>(top.size()) == want) threshold = top.front().first;
    }
    for (const auto& [value, token] : top)
      all.push_back({beam_scores[i] + static_cast<double>(value - lse), i, token});
  }
  // Best first; ties go to the lower beam, then the lower token id.
  std::sort(all.begin(), all.end(), [](const Candidate& a, const Candidate& b) {
    if (a.score != b.score) return a.score > b.score;
    return a.beam != b.beam ? a.beam < b.beam : a.token < b.token;
  });
  if (static_cast<int64_t>(all.size()) > want) all.resize(want);
  return all;
}

}  // namespace detail

namespace {

// Searches may share one model across threads (Translator's parallel batches), so the mode flags
// are written only when the model is still training.
void ensure_eval(Seq2Seq& model) {
  if (model->is_training()) model->eval();
}

// The decoder step a search runs: FusedStep when allowed, else the module's own.
class Stepper {
 public:
  Stepper(Seq2Seq& model, const SearchOptions& o) : decoder_(model->decoder) {
    if (o.fused && FusedStep::supports(decoder_)) fused_.emplace(decoder_);
  }
  StepOutput operator()(const at::Tensor& tokens, DecoderState& state) {
    rows_ += tokens.size(0);
    return fused_ ? fused_->step(tokens, state) : decoder_->step(tokens, state);
  }
  // Adds this search's work to `stats`, if any.
  void report(const at::Tensor& lengths, SearchStats* stats) const {
    if (!stats) return;
    stats->source_tokens += lengths.sum().item<int64_t>();
    stats->decoder_rows += rows_;
  }

 private:
  int64_t rows_ = 0;
  Decoder decoder_;
  std::optional<FusedStep> fused_;
};

}  // namespace

std::vector<std::vector<Hypothesis>> greedy_search(Seq2Seq& model, const at::Tensor& source,
                                                   const at::Tensor& lengths,
                                                   const SearchOptions& o, SearchStats* stats) {
  c10::InferenceMode inference;
  ensure_eval(model);
  const int64_t batch = source.size(0);
  auto limits = max_lengths(lengths, o);
  const int64_t limit = *std::max_element(limits.begin(), limits.end());
  auto state = model->decoder->start(model->encoder->forward(source, lengths));
  Stepper step(model, o);
  auto tokens = at::full({batch}, Vocab::kSos, at::kLong);
  std::vector<Hypothesis> hyps(batch);
  std::vector<at::Tensor> step_attention;  // [rows of that step, S] per step
  std::vector<Trail> trails(batch);        // each sentence's (step, row) pairs
  std::vector<float> scratch;
  std::vector<int64_t> active(batch);  // sentences still decoding, one row each
  std::iota(active.begin(), active.end(), 0);
  for (int64_t t = 0; t < limit && !active.empty(); ++t) {
    auto out = step(tokens, state);
    const auto logits = out.logits.to(at::kFloat).contiguous();  // [A, V]
    const int64_t vocab = logits.size(-1);
    step_attention.push_back(out.attention.to(at::kFloat).contiguous());
    scratch.resize(vocab);
    std::vector<int64_t> keep_rows, still_active, next;
    for (int64_t a = 0; a < static_cast<int64_t>(active.size()); ++a) {
      // The best token and its log-probability: its logit minus the row's log-sum-exp.
      const float* x = logits.data_ptr<float>() + a * vocab;
      const int64_t token = std::max_element(x, x + vocab) - x;
      const float lse = x[token] + std::log(kernels::simd::exp_shift(
                                       x, scratch.data(), static_cast<int>(vocab), x[token]));
      const int64_t b = active[a];
      hyps[b].log_prob += static_cast<double>(x[token] - lse);
      trails[b].emplace_back(t, a);
      if (token == Vocab::kEos || t + 1 >= limits[b]) {
        if (token != Vocab::kEos) hyps[b].tokens.push_back(token);
        continue;  // finished: its row leaves the batch
      }
      hyps[b].tokens.push_back(token);
      keep_rows.push_back(a);
      still_active.push_back(b);
      next.push_back(token);
    }
    if (still_active.size() != active.size() && !still_active.empty())
      state = state.select(at::tensor(keep_rows, at::kLong));
    active = std::move(still_active);
    tokens = at::tensor(next, at::kLong);
  }
  step.report(lengths, stats);
  std::vector<std::vector<Hypothesis>> results(batch);
  for (int64_t b = 0; b < batch; ++b) {
    hyps[b].score = normalise(hyps[b].log_prob, hyps[b].tokens.size() + 1, o.length_penalty);
    hyps[b].attention = gather_attention(step_attention, trails[b]);  // [T, S]
    results[b].push_back(std::move(hyps[b]));
  }
  return results;
}

std::vector<std::vector<Hypothesis>> beam_search(Seq2Seq& model, const at::Tensor& source,
                                                 const at::Tensor& lengths, const SearchOptions& o,
                                                 SearchStats* stats) {
  c10::InferenceMode inference;
  ensure_eval(model);
  const int64_t batch = source.size(0), k = std::max<int64_t>(1, o.beam_size);
  const int64_t nbest = std::min(std::max<int64_t>(1, o.nbest), k);
  auto limits = max_lengths(lengths, o);
  const int64_t limit = *std::max_element(limits.begin(), limits.end());

  // Every sentence starts as one beam (its k would all be the same), and has k from the
  // second step on.
  auto encoded = model->encoder->forward(source, lengths);
  Stepper step(model, o);
  auto state = model->decoder->start(encoded);  // [A * beams] rows, A = active sentences
  int64_t beams = 1;
  const double neg_inf = -std::numeric_limits<double>::infinity();
  std::vector<double> scores(batch, 0.0);  // [A, beams]: each beam's log-probability
  std::vector<float> scratch;
  auto tokens = at::full({batch}, Vocab::kSos, at::kLong);
  std::vector<int64_t> active(batch);  // the sentences still searching, in row-block order
  std::iota(active.begin(), active.end(), 0);
  using Beams = std::vector<std::vector<int64_t>>;
  using Attentions = std::vector<Trail>;   // per beam
  std::vector<at::Tensor> step_attention;  // [rows of that step, S] per step
  std::vector<Beams> seqs(batch, Beams(k));
  std::vector<Attentions> attns(batch, Attentions(k));
  std::vector<std::vector<Hypothesis>> finished(batch);

  for (int64_t t = 0; t < limit && !active.empty(); ++t) {
    const int64_t rows = static_cast<int64_t>(active.size());
    auto out = step(tokens, state);
    const auto logits = out.logits.to(at::kFloat).contiguous();           // [rows * beams, V]
    step_attention.push_back(out.attention.to(at::kFloat).contiguous());  // [rows * beams, S]
    const int64_t vocab = logits.size(-1);
    // 2k candidates: enough to keep k live beams after up to k of them finish.
    const int64_t want = std::min(2 * k, k * vocab);
    std::vector<int64_t> still_active, origin, next_token, source_rows;
    std::vector<double> next_scores;
    for (int64_t a = 0; a < rows; ++a) {
      const int64_t b = active[a];
      Beams new_seqs(k);
      Attentions new_attns(k);
      int64_t live = 0;
      std::vector<int64_t> my_origin, my_tokens;
      std::vector<double> my_scores;
      const auto candidates =
          detail::best_extensions(logits.data_ptr<float>() + a * beams * vocab, beams, vocab,
                                  scores.data() + a * beams, want, scratch);
      for (const detail::Candidate& c : candidates) {
        if (live >= k) break;
        const double score = c.score;
        const int64_t beam = c.beam, token = c.token;
        auto seq = seqs[b][beam];
        auto att = attns[b][beam];
        att.emplace_back(t, a * beams + beam);
        if (token == Vocab::kEos || t + 1 >= limits[b]) {
          if (token != Vocab::kEos) seq.push_back(token);
          Hypothesis h;
          h.tokens = std::move(seq);
          h.log_prob = score;
          h.score = normalise(score, h.tokens.size() + 1, o.length_penalty);
          h.attention = gather_attention(step_attention, att);
          finished[b].push_back(std::move(h));
          continue;
        }
        seq.push_back(token);
        my_origin.push_back(a * beams + beam);
        my_tokens.push_back(token);
        my_scores.push_back(score);
        new_seqs[live] = std::move(seq);
        new_attns[live] = std::move(att);
        ++live;
      }
      // A sentence with k finished hypotheses (or none left to extend) leaves the batch, so
      // later steps compute only the sentences still searching.
      if (static_cast<int64_t>(finished[b].size()) >= k || live == 0) continue;
      for (; live < k; ++live) {  // pad to k rows with dead beams
        my_origin.push_back(a * beams);
        my_tokens.push_back(Vocab::kPad);
        my_scores.push_back(neg_inf);
      }
      still_active.push_back(b);
      for (int64_t i = 0; i < k; ++i) source_rows.push_back(a * beams);
      origin.insert(origin.end(), my_origin.begin(), my_origin.end());
      next_token.insert(next_token.end(), my_tokens.begin(), my_tokens.end());
      next_scores.insert(next_scores.end(), my_scores.begin(), my_scores.end());
      seqs[b] = std::move(new_seqs);
      attns[b] = std::move(new_attns);
    }
    active = std::move(still_active);
    if (active.empty()) break;
    // Every beam of a sentence reads the same source rows, so those move only when sentences
    // leave the batch or their beams multiply.
    const bool moved = static_cast<int64_t>(active.size()) != rows || beams != k;
    state = state.reorder_beams(at::tensor(origin, at::kLong),
                                moved ? at::tensor(source_rows, at::kLong) : at::Tensor());
    beams = k;
    tokens = at::tensor(next_token, at::kLong);
    scores = std::move(next_scores);
  }
  step.report(lengths, stats);
  std::vector<std::vector<Hypothesis>> results(batch);
  for (int64_t b = 0; b < batch; ++b) {
    auto& f = finished[b];
    std::stable_sort(f.begin(), f.end(),
                     [](const Hypothesis& x, const Hypothesis& y) { return x.score > y.score; });
    if (static_cast<int64_t>(f.size()) > nbest) f.resize(nbest);
    results[b] = std::move(f);
  }
  return results;
}

std::vector<std::vector<Hypothesis>> search(Seq2Seq& model, const at::Tensor& source,
                                            const at::Tensor& lengths, const SearchOptions& o,
                                            SearchStats* stats) {
  return o.beam_size <= 1 ? greedy_search(model, source, lengths, o, stats)
                          : beam_search(model, source, lengths, o, stats);
}

}  // namespace attnkit::seq2seq
