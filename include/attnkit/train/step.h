#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

namespace torch::optim {
class Adam;
}

// The pieces of one training step around the model's forward and backward: the loss, gradient
// clipping, the optimizer update and clearing the gradients. The trainer and the training-step
// profiler (bench/profile_training.cpp) both run them.
namespace attnkit::train {

// Mean label-smoothed cross-entropy over the non-padding target tokens. logits [..., V],
// target [...] ([B, T, V] and [B, T], or the real tokens only: [N, V] and [N]). fused:
// kernels::label_smoothed_cross_entropy; false: the composite reference (log_softmax, gather,
// mean).
at::Tensor sequence_loss(const at::Tensor& logits, const at::Tensor& target, double label_smoothing,
                         bool fused = true);

// The same loss from the output layer's input: features [N, H] (Seq2Seq's Head::Features),
// the layer's weight [V, H] and bias [V], target [N]. fused: the layer and the loss as one node
// (kernels::linear_cross_entropy), which keeps no logits; false: the layer, then the composite
// sequence_loss.
at::Tensor projected_loss(const at::Tensor& features, const at::Tensor& weight,
                          const at::Tensor& bias, const at::Tensor& target, double label_smoothing,
                          bool fused = true);

// REINFORCE's moving-average reward baseline (Xu et al. 2015), carried across steps and
// checkpoints.
struct ReinforceBaseline {
  double value = 0;
  bool set = false;  // false until the first batch's mean reward initialises it
  double momentum = 0.9;
};

// The objective of hard attention trained with REINFORCE: `loss` minus the advantage-weighted
// log-probabilities of the sampled attention keys, minus an entropy bonus. The reward of a
// sentence is minus its mean token NLL under `logits` [B, T, V] for `target` [B, T] (padding
// excluded); the advantage is the reward minus `baseline`, which then moves towards the batch's
// mean reward. log_prob and entropy [B, T] are the decoder's (StepOutput).
at::Tensor reinforce_objective(const at::Tensor& loss, const at::Tensor& logits,
                               const at::Tensor& target, const at::Tensor& log_prob,
                               const at::Tensor& entropy, double entropy_bonus,
                               ReinforceBaseline& baseline);

// The gradients' global L2 norm and the factor min(1, max_norm / norm) that
// torch::nn::utils::clip_grad_norm_ scales them by, without scaling them.
struct GradClip {
  double norm = 0, scale = 1;
};
GradClip grad_clip(const std::vector<at::Tensor>& parameters, double max_norm);

// Scales all gradients by grad_clip's factor, as torch::nn::utils::clip_grad_norm_ does, in
// place and without its per-parameter dtype round trips; returns the norm before clipping.
double clip_grad_norm(const std::vector<at::Tensor>& parameters, double max_norm);

// optimizer.step() on the gradients times grad_scale, with each float32 CPU parameter updated by
// kernels::adam_update in one pass. The state (step, exp_avg, exp_avg_sq) is the optimizer's
// own, so checkpoints save and load as before. Options the kernel does not cover (weight decay,
// AMSGrad, other dtypes) take optimizer.step() itself, on gradients scaled in place. A
// grad_clip's scale given here is the step clip_grad_norm and adam_step take, bit for bit, a
// pass over the gradients shorter: their scaling was 0.9 % of a Transformer training step.
void adam_step(torch::optim::Adam& optimizer, double grad_scale = 1);

// Adds the gradients of a batch's parts to the parameters' (.grad, set where undefined): parts[k]
// holds part k's gradient for each of `parameters` (torch::autograd::grad's answer, undefined
// where the part gave none). Part by part in order, so the sums do not depend on which part
// finished first; each part's float32 additions are one job on the kernels' threads.
void add_gradients(const std::vector<at::Tensor>& parameters,
                   const std::vector<std::vector<at::Tensor>>& parts);

// Drops the gradients instead of zeroing them (PyTorch's zero_grad(set_to_none=True), its default
// since 2.0; LibTorch 1.13's Optimizer::zero_grad fills zeros). Backward then hands each
// parameter its gradient instead of adding it to a zero-filled one: two passes over every
// gradient saved per step. A parameter that gets no gradient is left alone by Adam.
void clear_gradients(const std::vector<at::Tensor>& parameters);

}  // namespace attnkit::train
