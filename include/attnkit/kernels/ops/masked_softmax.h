#pragma once

#include <ATen/core/Tensor.h>

// Softmax over the last dimension with masked positions at exactly 0, as one autograd node. The
// composite (functional::soft_weights: masked_fill, softmax, masked_fill) is six ops with their
// backward at every decoder step; on a [64, 1, 12] step they cost far more in dispatch than in
// arithmetic. A row with nothing to attend to gets zero weights and zero gradient, never NaN.
namespace attnkit::kernels {

// scores [..., Tk] float or double; keep: bool, broadcastable to scores (true = attend), or
// undefined. Differentiable in scores.
at::Tensor masked_softmax(const at::Tensor& scores, const at::Tensor& keep);

}  // namespace attnkit::kernels
