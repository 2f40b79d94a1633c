#include "attnkit/decoding/search.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <optional>
#include <random>

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

// Sentence b's forced token at position `at` of its translation, or -1.
int64_t forced(const SearchOptions& o, size_t b, size_t at) {
  if (b >= o.target_prefix.size() || at >= o.target_prefix[b].size()) return -1;
  return o.target_prefix[b][at];
}

// Leaves one token possible in a row of logits [V].
void only(float* logits, int64_t vocab, int64_t token) {
  if (token < 0 || token >= vocab) return;
  const float keep = logits[token];
  std::fill(logits, logits + vocab, -std::numeric_limits<float>::infinity());
  logits[token] = keep;
}

bool samples(const SearchOptions& o) { return o.sampling_topk != 1; }

// A token drawn from a row of logits [V] as SearchOptions' sampling says, and its log-probability
// under the model (temperature 1).
kernels::BestToken sample(const float* logits, int64_t vocab, const SearchOptions& o,
                          std::mt19937_64& rng) {
  const float top = *std::max_element(logits, logits + vocab);
  double total = 0;
  for (int64_t v = 0; v < vocab; ++v) total += std::exp(static_cast<double>(logits[v] - top));
  const double lse = static_cast<double>(top) + std::log(total);
  // The candidates, most likely first: the top k, then the nucleus within them.
  std::vector<int64_t> order(static_cast<size_t>(vocab));
  std::iota(order.begin(), order.end(), 0);
  const int64_t k = o.sampling_topk <= 0 ? vocab : std::min(o.sampling_topk, vocab);
  std::partial_sort(order.begin(), order.begin() + k, order.end(),
                    [&](int64_t a, int64_t b) { return logits[a] > logits[b]; });
  order.resize(static_cast<size_t>(k));
  std::vector<double> weight;
  double mass = 0;
  for (int64_t v : order) {
    if (mass >= o.sampling_topp && !weight.empty()) break;
    mass += std::exp(static_cast<double>(logits[v]) - lse);
    weight.push_back(std::exp((static_cast<double>(logits[v]) - top) / o.temperature));
  }
  std::discrete_distribution<size_t> pick(weight.begin(), weight.end());
  const int64_t token = order[pick(rng)];
  return {token, static_cast<float>(static_cast<double>(logits[token]) - lse)};
}

bool penalises(const SearchOptions& o) {
  return o.repetition_penalty != 1.0 || o.no_repeat_ngram > 0;
}

// SearchOptions' repetition penalty and n-gram ban on one row of logits [V], given the tokens
// its hypothesis wrote.
void penalise(float* logits, int64_t vocab, const std::vector<int64_t>& written,
              const SearchOptions& o) {
  if (o.repetition_penalty != 1.0) {
    const auto p = static_cast<float>(o.repetition_penalty);
    std::vector<bool> seen(static_cast<size_t>(vocab), false);
    for (int64_t token : written) {
      if (token < 0 || token >= vocab || seen[token]) continue;
      seen[token] = true;
      float& l = logits[token];
      l = l > 0 ? l / p : l * p;
    }
  }
  const auto n = static_cast<size_t>(o.no_repeat_ngram);
  if (n == 0 || written.size() + 1 < n) return;
  // The n-grams that end with the n - 1 tokens just written: their last tokens are banned.
  const size_t prefix = n - 1, w = written.size();
  for (size_t i = 0; i + n <= w; ++i)
    if (std::equal(written.begin() + i, written.begin() + i + prefix, written.end() - prefix)) {
      const int64_t banned = written[i + prefix];
      if (banned >= 0 && banned < vocab) logits[banned] = -std::numeric_limits<float>::infinity();
    }
}

// GNMT's coverage penalty of a hypothesis's attention [T, S'] over its source's `length`
// tokens.
double coverage(const at::Tensor& attention, int64_t length, double beta) {
  if (beta == 0 || !attention.defined() || attention.size(0) == 0) return 0;
  const int64_t s = std::min<int64_t>(length, attention.size(1));
  const auto received = attention.slice(1, 0, s).sum(0).clamp(1e-3, 1.0);
  return beta * received.log().sum().item<double>();
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
  std::vector<std::mt19937_64> rngs;  // each sentence's own, when sampling
  if (samples(o))
    for (int64_t b = 0; b < batch; ++b) {
      const uint64_t stream = static_cast<size_t>(b) < o.streams.size() ? o.streams[b] : b;
      std::seed_seq seq{static_cast<uint32_t>(o.seed), static_cast<uint32_t>(o.seed >> 32),
                        static_cast<uint32_t>(stream), static_cast<uint32_t>(stream >> 32)};
      rngs.emplace_back(seq);
    }
  for (int64_t t = 0; t < limit && !active.empty(); ++t) {
    auto out = step(tokens);
    const auto logits = out.logits.to(at::kFloat).contiguous();  // [A, V]
    const int64_t vocab = logits.size(-1);
    step_attention.push_back(out.attention.to(at::kFloat).contiguous());
    std::vector<int64_t> keep_rows, still_active, next;
    if (penalises(o))
      for (int64_t a = 0; a < static_cast<int64_t>(active.size()); ++a)
        penalise(logits.data_ptr<float>() + a * vocab, vocab, hyps[active[a]].tokens, o);
    for (int64_t a = 0; a < static_cast<int64_t>(active.size()); ++a) {
      const int64_t b = active[a];
      float* row = logits.data_ptr<float>() + a * vocab;
      const int64_t must = forced(o, static_cast<size_t>(b), hyps[b].tokens.size());
      if (must >= 0) only(row, vocab, must);
      const auto [token, log_prob] =
          must < 0 && samples(o) ? sample(row, vocab, o, rngs[b]) : kernels::best_token(row, vocab);
      hyps[b].log_prob += must < 0 ? static_cast<double>(log_prob) : 0.0;
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
            int64_t limit, int64_t source_length, int64_t k, const SearchOptions& o,
            const Paths& paths, const std::vector<at::Tensor>& step_attention,
            std::vector<Hypothesis>& finished, NextRows& next) {
  const size_t before = next.origin.size();
  int64_t live = 0;
  for (const kernels::Candidate& c : candidates) {
    // Candidates come best first: past the first impossible one (a token a prefix or a ban
    // ruled out, or a dead beam's), none is a hypothesis.
    if (live >= k || c.score == -std::numeric_limits<double>::infinity()) break;
    const int64_t row = a * width + c.beam;
    if (c.token == Vocab::kEos || t + 1 >= limit) {
      Hypothesis h;
      Trail trail;
      paths.read(t, row, h.tokens, trail);
      if (c.token != Vocab::kEos) h.tokens.push_back(c.token);
      h.log_prob = c.score;
      h.score = normalise(c.score, h.tokens.size() + 1, o.length_penalty);
      h.attention = gather_attention(step_attention, trail);
      h.score += coverage(h.attention, source_length, o.coverage_penalty);
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
  const auto source_lengths = lengths.to(at::kCPU).to(at::kLong);

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
    if (penalises(o)) {
      std::vector<int64_t> written;
      Trail trail;
      for (int64_t r = 0; r < rows * width; ++r) {
        paths.read(t, r, written, trail);
        penalise(logits.data_ptr<float>() + r * vocab, vocab, written, o);
      }
    }
    // Every hypothesis is at position t: a prefix leaves its sentence's rows one token.
    for (int64_t a = 0; a < rows && !o.target_prefix.empty(); ++a)
      if (const int64_t must = forced(o, static_cast<size_t>(active[a]), static_cast<size_t>(t));
          must >= 0)
        for (int64_t beam = 0; beam < width; ++beam)
          only(logits.data_ptr<float>() + (a * width + beam) * vocab, vocab, must);
    const auto candidates =
        kernels::best_extensions(logits.data_ptr<float>(), rows, width, vocab, scores.data(), want);
    for (int64_t a = 0; a < rows; ++a) {
      const int64_t b = active[a];
      // A finished sentence leaves the batch, so later steps compute only those still searching.
      if (!extend(candidates[a], a, width, t, limits[b], source_lengths[b].item<int64_t>(), k, o,
                  paths, step_attention, finished[b], next))
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
