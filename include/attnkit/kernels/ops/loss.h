#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

// Label-smoothed cross-entropy straight from the logits, fused: one pass forward (max, log-sum-exp,
// mean) and one pass backward (softmax minus the smoothed target), without the [M, V]
// log-probabilities, the gather and the mean that the composite path builds and differentiates.
// train::sequence_loss(..., fused = false) stays the reference.
namespace attnkit::kernels {

// logits [M, V] (float or double), target [M] (long). Per-token loss [M]:
//   (1 - eps) (lse - x[t]) + eps (lse - mean(x)),  lse = log sum_j exp(x[j]),
// and exactly 0 where target == ignore_index. Differentiable in the logits.
at::Tensor label_smoothed_cross_entropy(const at::Tensor& logits, const at::Tensor& target,
                                        double smoothing, int64_t ignore_index);

// The output layer and the loss as one node: label_smoothed_cross_entropy(x W^T + b, target)
// without keeping the logits. The forward pass turns each row of logits into its loss and, in
// place, into the loss's gradient while the row is in cache; the backward pass is the linear
// layer's two GEMMs on that gradient, and the bias's gradient was summed in the forward pass.
// x [N, K], weight [V, K], bias [V], target [N] (long) -> per-token loss [N]; differentiable in
// x, weight and bias. Float32 on the CPU; anything else runs the layer and the loss separately.
at::Tensor linear_cross_entropy(const at::Tensor& x, const at::Tensor& weight,
                                const at::Tensor& bias, const at::Tensor& target, double smoothing,
                                int64_t ignore_index);

}  // namespace attnkit::kernels
