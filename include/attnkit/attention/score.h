#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include "attnkit/attention/types.h"

namespace attnkit {

struct ScoreOptions {
  ScoreOptions(ScoreKind kind, int64_t query_size, int64_t key_size)
      : kind_(kind), query_size_(query_size), key_size_(key_size) {}
  TORCH_ARG(ScoreKind, kind);
  TORCH_ARG(int64_t, query_size);
  TORCH_ARG(int64_t, key_size);
  // Width H of the additive scores' hidden layer; 0 means key_size.
  TORCH_ARG(int64_t, hidden_size) = 0;
  TORCH_ARG(bool, bias) = true;
  // Additive scores in float32 use the fused kernel (kernels/additive_score.h); false selects
  // the composite reference path.
  TORCH_ARG(bool, fused) = true;
};

// Scores a query against every key. Parameters, by kind (names as a PyTorch module would have):
//   Concat    linear: Linear(Dq + Dk -> 1)          the notes' qk_linear
//   Additive  linear: Linear(Dq + Dk -> H)
//   Bahdanau  linear: Linear(Dq + Dk -> H), v: Linear(H -> 1, bias=false)
//   General   linear: Linear(Dk -> Dq, bias=false)
//   Dot, ScaledDot: none
// Decoders call project_keys() once per source sentence and score_projected() at every step,
// so the key half of an additive or general score is not recomputed per step.
class ScoreImpl : public torch::nn::Module {
 public:
  explicit ScoreImpl(ScoreOptions options);

  // k [B, Tk, Dk] -> the key-only part of the score: [B, Tk, *] (k itself for dot products).
  at::Tensor project_keys(const at::Tensor& k);
  // q [B, Tq, Dq], keys from project_keys() -> scores [B, Tq, Tk]. `query_weight`, from
  // query_weight() once per sequence, spares each step a view of the whole weight, whose
  // backward fills a weight-sized zero gradient per step; undefined: taken here.
  at::Tensor score_projected(const at::Tensor& q, const at::Tensor& keys,
                             const at::Tensor& query_weight = {});
  // The block of an additive or Bahdanau score's weight that multiplies the query, [H, Dq];
  // undefined for the other kinds.
  at::Tensor query_weight() const;
  // q [B, Tq, Dq], k [B, Tk, Dk] -> scores [B, Tq, Tk].
  at::Tensor forward(const at::Tensor& q, const at::Tensor& k);

  ScoreOptions options;
  torch::nn::Linear linear{nullptr};
  torch::nn::Linear v{nullptr};
};
TORCH_MODULE(Score);

// Luong's local-p position predictor: p = (S - 1) * sigmoid(v_p^T tanh(W_p q)), where S is the
// number of valid keys of the row, so the centre is a position in [0, S - 1].
class LocalPositionImpl : public torch::nn::Module {
 public:
  LocalPositionImpl(int64_t query_size, int64_t hidden_size);
  // q [B, Tq, Dq], source_lengths [B, Tq] (float) -> centres [B, Tq].
  at::Tensor forward(const at::Tensor& q, const at::Tensor& source_lengths);

  torch::nn::Linear w_p{nullptr};
  torch::nn::Linear v_p{nullptr};
};
TORCH_MODULE(LocalPosition);

}  // namespace attnkit
