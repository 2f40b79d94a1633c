#pragma once

#include <string>
#include <vector>

namespace attnkit {

// How a query is compared with each key (the notes' three formulas plus Luong's two).
enum class ScoreKind {
  Concat,     // the notes' formula 1: Linear([q; k]) -> 1
  Additive,   // the notes' formula 2: sum_h tanh(W [q; k] + b)_h
  Bahdanau,   // additive with a learned v: v^T tanh(W_q q + W_k k + b)
  ScaledDot,  // the notes' formula 3: q.k / sqrt(d_k)
  Dot,        // q.k (Luong "dot")
  General,    // q^T W k (Luong "general", bilinear)
};

// How scores become weights.
enum class WeightingKind {
  Soft,   // softmax: weights in (0, 1), differentiable
  Hard,   // one-hot argmax: weights in {0, 1}
  Local,  // Luong local-p: softmax inside a window around a predicted centre, times a Gaussian
};

// How gradients pass through hard (one-hot) weights during training.
enum class HardGradient {
  None,             // as in the notes: argmax has no gradient
  StraightThrough,  // forward one-hot, backward as softmax
  Gumbel,           // argmax of softmax((s + g) / tau), backward through that softmax
  Reinforce,        // sample a key from the softmax; the caller adds the REINFORCE loss
};

std::string to_string(ScoreKind k);
std::string to_string(WeightingKind k);
std::string to_string(HardGradient k);
// Parse the names printed by to_string(); an unknown name throws attnkit::Error listing the valid
// ones.
ScoreKind parse_score_kind(const std::string& name);
WeightingKind parse_weighting_kind(const std::string& name);
HardGradient parse_hard_gradient(const std::string& name);
const std::vector<std::string>& score_kind_names();
const std::vector<std::string>& weighting_kind_names();
const std::vector<std::string>& hard_gradient_names();

// Whether the score has parameters (and so needs a state_dict or an initialisation).
bool score_has_parameters(ScoreKind k);

}  // namespace attnkit
