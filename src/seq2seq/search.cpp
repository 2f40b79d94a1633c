#include "attnkit/seq2seq/search.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "attnkit/data/vocab.h"

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

}  // namespace

std::vector<std::vector<Hypothesis>> greedy_search(Seq2Seq& model, const at::Tensor& source,
                                                   const at::Tensor& lengths,
                                                   const SearchOptions& o) {
  c10::InferenceMode inference;
  model->eval();
  const int64_t batch = source.size(0);
  auto limits = max_lengths(lengths, o);
  const int64_t limit = *std::max_element(limits.begin(), limits.end());
  auto state = model->decoder->start(model->encoder->forward(source, lengths));
  auto tokens = at::full({batch}, Vocab::kSos, at::kLong);
  std::vector<Hypothesis> hyps(batch);
  std::vector<std::vector<at::Tensor>> attention(batch);
  std::vector<bool> done(batch, false);
  int64_t remaining = batch;
  for (int64_t t = 0; t < limit && remaining > 0; ++t) {
    auto out = model->decoder->step(tokens, state);
    auto log_probs = at::log_softmax(out.logits, -1);  // [B, V]
    auto [best, index] = log_probs.max(-1);
    auto best_cpu = best.to(at::kDouble), index_cpu = index.to(at::kLong);
    for (int64_t b = 0; b < batch; ++b) {
      if (done[b]) continue;
      const int64_t token = index_cpu[b].item<int64_t>();
      hyps[b].log_prob += best_cpu[b].item<double>();
      attention[b].push_back(out.attention[b]);
      if (token == Vocab::kEos || t + 1 >= limits[b]) {
        if (token != Vocab::kEos) hyps[b].tokens.push_back(token);
        done[b] = true;
        --remaining;
      } else {
        hyps[b].tokens.push_back(token);
      }
    }
    tokens = index;
  }
  std::vector<std::vector<Hypothesis>> results(batch);
  for (int64_t b = 0; b < batch; ++b) {
    hyps[b].score = normalise(hyps[b].log_prob, hyps[b].tokens.size() + 1, o.length_penalty);
    hyps[b].attention = at::stack(attention[b]);  // [T, S]
    results[b].push_back(std::move(hyps[b]));
  }
  return results;
}

std::vector<std::vector<Hypothesis>> beam_search(Seq2Seq& model, const at::Tensor& source,
                                                 const at::Tensor& lengths,
                                                 const SearchOptions& o) {
  c10::InferenceMode inference;
  model->eval();
  const int64_t batch = source.size(0), k = std::max<int64_t>(1, o.beam_size);
  const int64_t nbest = std::min(std::max<int64_t>(1, o.nbest), k);
  auto limits = max_lengths(lengths, o);
  const int64_t limit = *std::max_element(limits.begin(), limits.end());

  // Every sentence starts as k copies; only the first is live, so the first step does not
  // pick the same token k times.
  auto encoded = model->encoder->forward(source, lengths);
  auto state = model->decoder->start(encoded).select(
      at::arange(batch, at::kLong).repeat_interleave(k));  // N = B * k rows
  auto scores = at::full({batch, k}, -std::numeric_limits<double>::infinity(), at::kDouble);
  scores.select(1, 0).fill_(0);
  auto tokens = at::full({batch * k}, Vocab::kSos, at::kLong);
  std::vector<std::vector<std::vector<int64_t>>> seqs(batch, std::vector<std::vector<int64_t>>(k));
  std::vector<std::vector<std::vector<at::Tensor>>> attns(batch,
                                                          std::vector<std::vector<at::Tensor>>(k));
  std::vector<std::vector<Hypothesis>> finished(batch);
  std::vector<bool> done(batch, false);
  const double neg_inf = -std::numeric_limits<double>::infinity();

  for (int64_t t = 0; t < limit; ++t) {
    auto out = model->decoder->step(tokens, state);
    const int64_t vocab = out.logits.size(-1);
    auto log_probs = at::log_softmax(out.logits, -1).to(at::kDouble).view({batch, k, vocab});
    auto total = (scores.unsqueeze(-1) + log_probs).view({batch, k * vocab});
    // 2k candidates: enough to keep k live beams after up to k of them finish.
    auto [top_scores, top_index] = total.topk(std::min(2 * k, k * vocab), -1);
    auto top_scores_cpu = top_scores.contiguous(), top_index_cpu = top_index.contiguous();
    auto attention_cpu = out.attention.view({batch, k, -1});

    std::vector<int64_t> origin(batch * k, 0), next_token(batch * k, Vocab::kPad);
    auto new_scores = at::full({batch, k}, neg_inf, at::kDouble);
    std::vector<std::vector<std::vector<int64_t>>> new_seqs(batch,
                                                            std::vector<std::vector<int64_t>>(k));
    std::vector<std::vector<std::vector<at::Tensor>>> new_attns(
        batch, std::vector<std::vector<at::Tensor>>(k));
    for (int64_t b = 0; b < batch; ++b) {
      if (done[b]) continue;
      int64_t live = 0;
      for (int64_t c = 0; c < top_index_cpu.size(1) && live < k; ++c) {
        const double score = top_scores_cpu[b][c].item<double>();
        if (score == neg_inf) break;
        const int64_t flat = top_index_cpu[b][c].item<int64_t>();
        const int64_t beam = flat / vocab, token = flat % vocab;
        auto seq = seqs[b][beam];
        auto att = attns[b][beam];
        att.push_back(attention_cpu[b][beam]);
        const bool at_limit = t + 1 >= limits[b];
        if (token == Vocab::kEos || at_limit) {
          if (token != Vocab::kEos) seq.push_back(token);
          Hypothesis h;
          h.tokens = std::move(seq);
          h.log_prob = score;
          h.score = normalise(score, h.tokens.size() + 1, o.length_penalty);
          h.attention = at::stack(att);
          finished[b].push_back(std::move(h));
          continue;
        }
        seq.push_back(token);
        origin[b * k + live] = b * k + beam;
        next_token[b * k + live] = token;
        new_scores[b][live] = score;
        new_seqs[b][live] = std::move(seq);
        new_attns[b][live] = std::move(att);
        ++live;
      }
      // Done when k hypotheses have finished and none still live can beat the best of them
      // (log-probabilities only fall, so a live beam's normalised score is bounded by now).
      if (static_cast<int64_t>(finished[b].size()) >= k || live == 0) done[b] = true;
    }
    if (std::all_of(done.begin(), done.end(), [](bool d) { return d; })) break;
    scores = new_scores;
    seqs = std::move(new_seqs);
    attns = std::move(new_attns);
    auto index = at::tensor(origin, at::kLong);
    state = state.select(index);
    tokens = at::tensor(next_token, at::kLong);
  }
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
                                            const at::Tensor& lengths, const SearchOptions& o) {
  return o.beam_size <= 1 ? greedy_search(model, source, lengths, o)
                          : beam_search(model, source, lengths, o);
}

}  // namespace attnkit::seq2seq
