#pragma once

#include <ATen/core/Tensor.h>

// The attention's weighted sum for a few queries per row, as decoder steps have:
//   context[n, i, :] = sum_j weights[n, i, j] values[n, j, :].
// For [N, 1, Tk] x [N, Tk, D], at::bmm on the CPU runs one tiny GEMM per row and its backward
// two more; the profile of a training step put these at 14% of its time. Here each row is one
// pass over its values, forward and backward. at::matmul stays the reference.
namespace attnkit::kernels {

// weights [N, Tq, Tk], values [N, Tk, D] -> [N, Tq, D]. Float or double; differentiable in both.
at::Tensor attention_context(const at::Tensor& weights, const at::Tensor& values);

}  // namespace attnkit::kernels
