#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "attnkit/seq2seq/model.h"

// Search strategies over the decoder-step interface (Decoder::start/step, DecoderState::select).
namespace attnkit::seq2seq {

struct SearchOptions {
  int64_t beam_size = 5;          // 1 = greedy
  double length_penalty = 1.0;    // score / length^alpha; 0 = raw log-probability
  double max_length_ratio = 2.0;  // at most ratio * source length + max_length_extra tokens
  int64_t max_length_extra = 5;
  int64_t nbest = 1;
  // Decode with FusedStep where the model's configuration allows; false: DecoderImpl::step.
  bool fused = true;
};

struct Hypothesis {
  std::vector<int64_t> tokens;  // without <sos>/<eos>
  double score = 0;             // length-normalised log-probability
  double log_prob = 0;          // raw log-probability (including <eos>)
  at::Tensor attention;         // [T, S] for the emitted tokens (and <eos>)
};

// What a search computed, added to by each search it is passed to: the work behind a speed, for
// utilisation figures (bench/performance.py).
struct SearchStats {
  int64_t source_tokens = 0;  // encoded, padding not counted
  int64_t decoder_rows = 0;   // decoder steps summed over the rows (sentences x beams) they ran
};

// One list of hypotheses (best first, at most nbest) per source sentence.
// source [B, S], lengths [B]. The model is put in eval mode for the search.
std::vector<std::vector<Hypothesis>> greedy_search(Seq2Seq& model, const at::Tensor& source,
                                                   const at::Tensor& lengths,
                                                   const SearchOptions& options,
                                                   SearchStats* stats = nullptr);
std::vector<std::vector<Hypothesis>> beam_search(Seq2Seq& model, const at::Tensor& source,
                                                 const at::Tensor& lengths,
                                                 const SearchOptions& options,
                                                 SearchStats* stats = nullptr);
// Dispatches on options.beam_size.
std::vector<std::vector<Hypothesis>> search(Seq2Seq& model, const at::Tensor& source,
                                            const at::Tensor& lengths, const SearchOptions& options,
                                            SearchStats* stats = nullptr);

namespace detail {  // beam search's candidate ranking, public for its tests

struct Candidate {
  double score;  // the beam's log-probability plus the token's
  int64_t beam, token;
};

// The best `want` one-token extensions of a sentence's k beams, best first. logits [k, V];
// beams scored -inf are dead. A beam's log-probabilities are its logits minus one log-sum-exp,
// so its best tokens are its largest logits; and any of the best `want` extensions overall is
// among its own beam's best `want`. So each beam contributes its `want` largest logits (one
// pass), and only those k * want candidates are ranked: no [k, V] log-probabilities in double
// and no top-k over k * V, as the composite version needed.
// `scratch` is reused between calls.
std::vector<Candidate> best_extensions(const float* logits, int64_t k, int64_t vocab,
                                       const double* beam_scores, int64_t want,
                                       std::vector<float>& scratch);

}  // namespace detail

}  // namespace attnkit::seq2seq
