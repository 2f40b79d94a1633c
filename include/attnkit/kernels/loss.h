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

}  // namespace attnkit::kernels
