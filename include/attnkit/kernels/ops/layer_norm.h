#pragma once

#include <ATen/core/Tensor.h>

#include <utility>

// Layer normalisation over the last dimension, y = (x - mean) / sqrt(var + eps) * weight + bias,
// on the kernels' threads. ATen's layer_norm gets no thread under ThreadPolicy::Kernels, so in a
// Transformer training step its forward and backward passes ran on one core while the other
// waited: about 7 % of the main thread's samples. Here the rows are split between the threads
// (each row on its own: the same bits on any thread count) and the weight's and bias's
// gradients are column sums in row order (products::column_sums). at::layer_norm is the
// reference and the path for anything but float and double on the CPU
// (tests/test_step_kernels.cpp, LayerNormKernel.*).
namespace attnkit::kernels {

// x [..., D], weight and bias [D] -> [..., D]; without a weight or a bias, the reference.
at::Tensor layer_norm(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                      double eps);

// {x, layer_norm(x, weight, bias, eps)}: the residual stream at a pre-norm sublayer, x going on
// and into the sublayer normalised, as one autograd node. Use the first tensor for the stream
// (x + f(norm(x)) as first + f(second)): x's two gradients then meet inside the norm's backward
// pass, on the kernels' threads, instead of in an add of LibTorch's engine on one thread (in a
// Transformer training step the engine's adds ran on one core while the other waited). The
// values and gradients are those of the two used apart. x [..., D] contiguous (float or double
// on the CPU); otherwise, or without gradients, {x, layer_norm(...)}.
std::pair<at::Tensor, at::Tensor> layer_norm_branch(const at::Tensor& x, const at::Tensor& weight,
                                                    const at::Tensor& bias, double eps);

}  // namespace attnkit::kernels
