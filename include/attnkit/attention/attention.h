#pragma once

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include "attnkit/attention/score.h"
#include "attnkit/attention/types.h"

namespace attnkit {

struct AttentionOptions {
  AttentionOptions(int64_t query_size, int64_t key_size)
      : query_size_(query_size), key_size_(key_size) {}
  TORCH_ARG(int64_t, query_size);
  TORCH_ARG(int64_t, key_size);
  TORCH_ARG(ScoreKind, score) = ScoreKind::Additive;
  // Width of the additive scores' hidden layer (and of the local-p predictor); 0 means key_size.
  TORCH_ARG(int64_t, hidden_size) = 0;
  TORCH_ARG(WeightingKind, weighting) = WeightingKind::Soft;
  // Gradient of hard weights while training; in eval mode hard weights are a plain argmax.
  TORCH_ARG(HardGradient, hard_gradient) = HardGradient::StraightThrough;
  // Gumbel-softmax temperature.
  TORCH_ARG(double, temperature) = 1.0;
  // Half-width D of the local window.
  TORCH_ARG(int64_t, window) = 4;
};

struct AttentionOutput {
  at::Tensor output{};    // [B, Tq, Dv] (the context C)
  at::Tensor weights{};   // [B, Tq, Tk]
  at::Tensor log_prob{};  // [B, Tq]: REINFORCE sampling only (training, HardGradient::Reinforce)
  at::Tensor entropy{};   // [B, Tq]: idem
};

// Any score with any weighting: weights = weighting(score(Q, K), mask); C = weights V.
class AttentionImpl : public torch::nn::Module {
 public:
  explicit AttentionImpl(AttentionOptions options);

  // q [B, Tq, Dq], k [B, Tk, Dk], v [B, Tk, Dv], mask broadcastable to [B, Tq, Tk].
  AttentionOutput forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                          const at::Tensor& mask = {});
  // The decoder-step path: keys come from project_keys(), computed once per source, and
  // query_weight (Score::score_projected) from score->query_weight(), once per sequence.
  at::Tensor project_keys(const at::Tensor& k);
  AttentionOutput attend(const at::Tensor& q, const at::Tensor& projected_keys, const at::Tensor& v,
                         const at::Tensor& mask = {}, const at::Tensor& query_weight = {});

  AttentionOptions options;
  Score score{nullptr};
  LocalPosition local{nullptr};  // only for WeightingKind::Local
};
TORCH_MODULE(Attention);

}  // namespace attnkit
