#include "attnkit/decoding/search.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <optional>

#include "attnkit/data/vocab.h"
#include "attnkit/kernels/ops/top_k.h"

namespace attnkit::decoding {
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

namespace {

// Counts the rows each step ran, for SearchStats.
class CountingDecoder {
 public:
  explicit CountingDecoder(StepDecoder& decoder) : decoder_(decoder) {}
  StepDecoder::Step operator()(const at::Tensor& tokens) {
    rows_ += tokens.size(0);
    return decoder_.step(tokens);
  }
  void report(const at::Tensor& lengths, SearchStats* stats) const {
    if (!stats) return;
    stats->source_tokens += lengths.sum().item<int64_t>();
    stats->decoder_rows += rows_;
  }

 private:
  StepDecoder& decoder_;
  int64_t rows_ = 0;
};

}  // namespace

std::vector<std::vector<Hypothesis>> greedy_search(StepDecoder& decoder, const at::Tensor& lengths,
                                                   const SearchOptions& o, SearchStats* stats) {
  c10::InferenceMode inference;
  const int64_t batch = lengths.size(0);
  auto limits = max_lengths(lengths, o);
  const int64_t limit = *std::max_element(limits.begin(), limits.end());
  CountingDecoder step(decoder);
  auto tokens = at::full({batch}, Vocab::kSos, at::kLong);
  std::vector<Hypothesis> hyps(batch);
  std::vector<at::Tensor> step_attention;  // [rows of that step, S] per step
  std::vector<Trail> trails(batch);        // each sentence's (step, row) pairs
  std::vector<int64_t> active(batch);      // sentences still decoding, one row each
  std::iota(active.begin(), active.end(), 0);
  for (int64_t t = 0; t < limit && !active.empty(); ++t) {
    auto out = step(tokens);
    const auto logits = out.logits.to(at::kFloat).contiguous();  // [A, V]
    const int64_t vocab = logits.size(-1);
    step_attention.push_back(out.attention.to(at::kFloat).contiguous());
    std::vector<int64_t> keep_rows, still_active, next;
    for (int64_t a = 0; a < static_cast<int64_t>(active.size()); ++a) {
      const auto [token, log_prob] =
          kernels::best_token(logits.data_ptr<float>() + a * vocab, vocab);
      const int64_t b = active[a];
      hyps[b].log_prob += static_cast<double>(log_prob);
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
    if (still_active.size() != active.size() && !still_active.empty()) {
      const auto rows = at::tensor(keep_rows, at::kLong);
      decoder.reorder(rows, rows, /*width=*/1);
    }
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

namespace {

// Every step's rows as the row of the step before that each continues and the token it was fed:
// a hypothesis is a path back through them. Extending a beam then copies nothing (each of a
// step's up to 2k candidates per sentence had copied its beam's tokens and trail: with the
// allocations, 1.8 % of a beam search's samples, beam 5, batch 32, two Zen 5 cores); a
// hypothesis's tokens and trail are read back once, when it finishes.
class Paths {
 public:
  // The rows of step t + 1, in order: each continues row origin[i] of step t, fed tokens[i].
  void add_step(const std::vector<int64_t>& origin, const std::vector<int64_t>& tokens) {
    origin_.push_back(origin);
    fed_.push_back(tokens);
  }
  // Row `row` of step t: the tokens it was fed after <sos>, and its (step, row) trail.
  void read(int64_t t, int64_t row, std::vector<int64_t>& tokens, Trail& trail) const {
    tokens.resize(t);
    trail.resize(t + 1);
    for (int64_t s = t; s >= 0; --s) {
      trail[s] = {s, row};
      if (s == 0) break;
      tokens[s - 1] = fed_[s - 1][row];
      row = origin_[s - 1][row];
    }
  }

 private:
  std::vector<std::vector<int64_t>> origin_, fed_;  // [step - 1][row of that step]
};

// The rows of the next step, sentence after sentence: each with the row it continues, its token
// and its score.
struct NextRows {
  std::vector<int64_t> origin, tokens;
  std::vector<double> scores;
  void resize(size_t rows) {
    origin.resize(rows);
    tokens.resize(rows);
    scores.resize(rows);
  }
};

// Extends sentence b's beams (rows a * width .. of step t) by its best candidates. Candidates
// that end (<eos>, or the length limit) join finished[b]; the others, up to k, are the sentence's
// next beams, appended to `next` (k rows, dead beams padded in). Returns false, having appended
// nothing, when the sentence is done: k finished, or no beam left to extend.
bool extend(const std::vector<kernels::Candidate>& candidates, int64_t a, int64_t width, int64_t t,
            int64_t limit, int64_t k, const SearchOptions& o, const Paths& paths,
            const std::vector<at::Tensor>& step_attention, std::vector<Hypothesis>& finished,
            NextRows& next) {
  const size_t before = next.origin.size();
  int64_t live = 0;
  for (const kernels::Candidate& c : candidates) {
    if (live >= k) break;
    const int64_t row = a * width + c.beam;
    if (c.token == Vocab::kEos || t + 1 >= limit) {
      Hypothesis h;
      Trail trail;
      paths.read(t, row, h.tokens, trail);
      if (c.token != Vocab::kEos) h.tokens.push_back(c.token);
      h.log_prob = c.score;
      h.score = normalise(c.score, h.tokens.size() + 1, o.length_penalty);
      h.attention = gather_attention(step_attention, trail);
      finished.push_back(std::move(h));
      continue;
    }
    next.origin.push_back(row);
    next.tokens.push_back(c.token);
    next.scores.push_back(c.score);
    ++live;
  }
  if (static_cast<int64_t>(finished.size()) >= k || live == 0) {
    next.resize(before);
    return false;
  }
  for (; live < k; ++live) {  // pad to k rows with dead beams
    next.origin.push_back(a * width);
    next.tokens.push_back(Vocab::kPad);
    next.scores.push_back(-std::numeric_limits<double>::infinity());
  }
  return true;
}

// Each sentence's best `nbest` finished hypotheses, best first.
std::vector<std::vector<Hypothesis>> best_of(std::vector<std::vector<Hypothesis>> finished,
                                             int64_t nbest) {
  for (auto& f : finished) {
    std::stable_sort(f.begin(), f.end(),
                     [](const Hypothesis& x, const Hypothesis& y) { return x.score > y.score; });
    if (static_cast<int64_t>(f.size()) > nbest) f.resize(nbest);
  }
  return finished;
}

}  // namespace

std::vector<std::vector<Hypothesis>> beam_search(StepDecoder& decoder, const at::Tensor& lengths,
                                                 const SearchOptions& o, SearchStats* stats) {
  c10::InferenceMode inference;
  const int64_t batch = lengths.size(0), k = std::max<int64_t>(1, o.beam_size);
  const auto limits = max_lengths(lengths, o);
  const int64_t limit = *std::max_element(limits.begin(), limits.end());

  // Every sentence starts as one beam (its k would all be the same), and has k from the
  // second step on.
  CountingDecoder step(decoder);           // rows: [A * width]
  int64_t width = 1;                       // beams per active sentence
  std::vector<double> scores(batch, 0.0);  // [A, width]: each beam's log-probability
  auto tokens = at::full({batch}, Vocab::kSos, at::kLong);
  std::vector<int64_t> active(batch);  // the sentences still searching, in row-block order
  std::iota(active.begin(), active.end(), 0);
  std::vector<at::Tensor> step_attention;  // [rows of that step, S] per step
  Paths paths;
  std::vector<std::vector<Hypothesis>> finished(batch);

  for (int64_t t = 0; t < limit && !active.empty(); ++t) {
    const int64_t rows = static_cast<int64_t>(active.size());
    auto out = step(tokens);
    const auto logits = out.logits.to(at::kFloat).contiguous();           // [rows * width, V]
    step_attention.push_back(out.attention.to(at::kFloat).contiguous());  // [rows * width, S]
    const int64_t vocab = logits.size(-1);
    // 2k candidates: enough to keep k live beams after up to k of them finish.
    const int64_t want = std::min(2 * k, k * vocab);
    std::vector<int64_t> still_active, kept;
    NextRows next;
    const auto candidates =
        kernels::best_extensions(logits.data_ptr<float>(), rows, width, vocab, scores.data(), want);
    for (int64_t a = 0; a < rows; ++a) {
      const int64_t b = active[a];
      // A finished sentence leaves the batch, so later steps compute only those still searching.
      if (!extend(candidates[a], a, width, t, limits[b], k, o, paths, step_attention, finished[b],
                  next))
        continue;
      still_active.push_back(b);
      kept.push_back(a);
    }
    active = std::move(still_active);
    if (active.empty()) break;
    // Every beam of a sentence reads the same source, so that moves only when sentences leave.
    const bool left = static_cast<int64_t>(active.size()) != rows;
    decoder.reorder(at::tensor(next.origin, at::kLong),
                    left ? at::tensor(kept, at::kLong) : at::Tensor(), k);
    width = k;
    paths.add_step(next.origin, next.tokens);
    tokens = at::tensor(next.tokens, at::kLong);
    scores = std::move(next.scores);
  }
  step.report(lengths, stats);
  return best_of(std::move(finished), std::min(std::max<int64_t>(1, o.nbest), k));
}

std::vector<std::vector<Hypothesis>> search(StepDecoder& decoder, const at::Tensor& lengths,
                                            const SearchOptions& o, SearchStats* stats) {
  return o.beam_size <= 1 ? greedy_search(decoder, lengths, o, stats)
                          : beam_search(decoder, lengths, o, stats);
}

}  // namespace attnkit::decoding
