#pragma once

#include <ATen/core/Tensor.h>

#include <tuple>
#include <utility>

#include "attnkit/attention/types.h"

// The ops layer: stateless attention math on tensors. Modules (score.h, attention.h, ...) own
// parameters and call these. Shapes: Q [B, Tq, Dq], K [B, Tk, Dk], V [B, Tk, Dv]; Tq = 1 is a
// decoder step. Masks follow mask.h (true = attend) and broadcast to [B, Tq, Tk].
namespace attnkit::functional {

// ---- scores: all return [B, Tq, Tk] ----

// Seed formula 1. weight [1, Dq + Dk], bias [1] or undefined. Splitting the Linear over [q; k]
// into W_q q + W_k k gives the same numbers without materialising the [B, Tq, Tk, Dq + Dk] concat.
at::Tensor concat_score(const at::Tensor& q, const at::Tensor& k, const at::Tensor& weight,
                        const at::Tensor& bias);
// The key half, W_k K + b: [B, Tk, 1]; and the query half added to it -> [B, Tq, Tk].
at::Tensor concat_project_keys(const at::Tensor& k, const at::Tensor& weight,
                               const at::Tensor& bias, int64_t query_size);
at::Tensor concat_score_projected(const at::Tensor& q, const at::Tensor& keys_proj,
                                  const at::Tensor& weight);

// Seed formula 2: sum over h of tanh(W [q; k] + b). weight [H, Dq + Dk], bias [H] or undefined.
// With v ([H] or [1, H]) defined, the sum becomes Bahdanau's v^T tanh(...).
at::Tensor additive_score(const at::Tensor& q, const at::Tensor& k, const at::Tensor& weight,
                          const at::Tensor& bias, const at::Tensor& v = {});

// The key half of the additive score, W_k K + b: [B, Tk, H]. Computed once per source sentence.
at::Tensor additive_project_keys(const at::Tensor& k, const at::Tensor& weight,
                                 const at::Tensor& bias, int64_t query_size);
// The query half applied to projected keys: sum_h or v^T of tanh(W_q q + keys_proj).
at::Tensor additive_score_projected(const at::Tensor& q, const at::Tensor& keys_proj,
                                    const at::Tensor& weight, const at::Tensor& v = {});

at::Tensor dot_score(const at::Tensor& q, const at::Tensor& k);
// Seed formula 3: q k^T / sqrt(d_k).
at::Tensor scaled_dot_score(const at::Tensor& q, const at::Tensor& k);
// Luong general: q^T W k with W [Dq, Dk] (a Linear(Dk -> Dq) weight).
at::Tensor general_score(const at::Tensor& q, const at::Tensor& k, const at::Tensor& weight);

// ---- weightings: scores [..., Tq, Tk] -> weights of the same shape ----

// Softmax over keys. Masked keys get exactly 0; a fully masked (or empty) row gets all zeros.
at::Tensor soft_weights(const at::Tensor& scores, const at::Tensor& mask = {});

// One-hot at the highest-scoring unmasked key (the first on ties); a fully masked row is all zero.
// StraightThrough: forward one-hot, gradient of soft_weights. Gumbel: argmax of
// softmax((scores + g) / tau) with gradient through that softmax; `gumbel_noise` (same shape as
// scores) is drawn as -log(Exp(1)) from the default generator when undefined.
at::Tensor hard_weights(const at::Tensor& scores, const at::Tensor& mask = {},
                        HardGradient gradient = HardGradient::None, double temperature = 1.0,
                        const at::Tensor& gumbel_noise = {});

// Samples one key per row from soft_weights(scores, mask) (Xu et al. 2015's stochastic hard
// attention). Returns (one-hot weights without gradient, log-probability of the sampled key
// [..., Tq], entropy of the distribution [..., Tq]); the latter two carry gradients for
// REINFORCE. Fully masked rows get zero weights, log-probability and entropy.
std::tuple<at::Tensor, at::Tensor, at::Tensor> sample_hard_weights(const at::Tensor& scores,
                                                                   const at::Tensor& mask = {});

// Gumbel-softmax relaxation, soft: softmax((scores + g) / tau), masked.
at::Tensor gumbel_soft_weights(const at::Tensor& scores, const at::Tensor& mask, double temperature,
                               const at::Tensor& gumbel_noise);

// Luong local-p. centres [B, Tq] (positions, float), window D: a masked softmax over the keys
// with |j - p| <= D, times exp(-(j - p)^2 / (2 sigma^2)) with sigma = D / 2. As in Luong et al.
// (2015) the Gaussian is applied after the softmax, so a row sums to at most 1.
at::Tensor local_weights(const at::Tensor& scores, const at::Tensor& centres, int64_t window,
                         const at::Tensor& mask = {});

// Applies any weighting chosen at run time (Local needs centres).
at::Tensor weights_for(WeightingKind kind, const at::Tensor& scores, const at::Tensor& mask,
                       HardGradient gradient, double temperature, const at::Tensor& centres = {},
                       int64_t window = 0, const at::Tensor& gumbel_noise = {});

// weights [B, Tq, Tk] x V [B, Tk, Dv] -> context [B, Tq, Dv].
at::Tensor context(const at::Tensor& weights, const at::Tensor& v);

// softmax(Q K^T / sqrt(d) , mask) V for Q [..., Tq, d], K [..., Tk, d], V [..., Tk, dv], any
// number of leading batch dims (e.g. [B, H]). Returns (output, weights). dropout > 0 drops
// weights before the product with V (training); the weights returned are those before it.
std::pair<at::Tensor, at::Tensor> scaled_dot_product_attention(const at::Tensor& q,
                                                               const at::Tensor& k,
                                                               const at::Tensor& v,
                                                               const at::Tensor& mask = {},
                                                               double dropout = 0.0);

// Entry checks shared by every Q/K/V entry point: ranks, batch and length agreement, named shapes.
void check_qkv(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const char* where);

}  // namespace attnkit::functional
