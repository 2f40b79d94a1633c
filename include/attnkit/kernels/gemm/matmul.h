#pragma once

#include <ATen/core/Tensor.h>

namespace attnkit::kernels {

// out [m, n] = a [m, k] b [k, n], float32 and contiguous, on attnkit's packed blocks
// (src/kernels/packed_gemm.h): b packed once per call, rows split between the configured
// threads. The one-off product as the kernels run it; bench/ measures the machine's peak with it.
// Each element is one sum over k in ascending order, so the thread count never changes a result.
void matmul(const at::Tensor& a, const at::Tensor& b, at::Tensor& out);

}  // namespace attnkit::kernels
