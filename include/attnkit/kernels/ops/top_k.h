#pragma once

#include <cstdint>
#include <vector>

// The searches' per-step choice on raw logits: log-softmax and the best tokens, without a
// [rows, V] log-probability tensor. Tested against the composite (log_softmax, then topk over all
// extensions) in tests/test_fused_step.cpp, under every ISA.
namespace attnkit::kernels {

struct Candidate {
  double score;  // the beam's log-probability plus the token's
  int64_t beam, token;
};

// The best `want` one-token extensions of a sentence's k beams, best first; ties go to the lower
// beam, then the lower token id. logits [k, V]; beams scored -inf are dead. A beam's
// log-probabilities are its logits minus one log-sum-exp, so its best tokens are its largest
// logits; and any of the best `want` extensions overall is among its own beam's best `want`. So
// each beam contributes its `want` largest logits, and only those k * want candidates are
// ranked: no [k, V] log-probabilities in double and no top-k over k * V, as the composite
// version needed. Two passes over a beam's row: its largest logits (the first is its maximum),
// then the sum of exponentials, nothing stored.
std::vector<Candidate> best_extensions(const float* logits, int64_t k, int64_t vocab,
                                       const double* beam_scores, int64_t want);

// The same for a step's sentences at once: logits [sentences * k, V], beam_scores
// [sentences * k]; element s is sentence s's best, exactly what the call above gives for it
// alone. Whole sentences go to the kernels' threads (a beam search's ranking otherwise runs on
// one core while the other waits for the next step's products).
std::vector<std::vector<Candidate>> best_extensions(const float* logits, int64_t sentences,
                                                    int64_t k, int64_t vocab,
                                                    const double* beam_scores, int64_t want);

struct BestToken {
  int64_t token;   // the first largest logit's index
  float log_prob;  // its logit minus the row's log-sum-exp
};

// Greedy search's choice for one row of logits [V].
BestToken best_token(const float* logits, int64_t vocab);

}  // namespace attnkit::kernels
