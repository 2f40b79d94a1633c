#pragma once

#include <ATen/core/Tensor.h>

// at::linear for inference over a few rows. LibTorch's addmm always calls GEMM, and OpenBLAS's
// GEMM packs the whole weight matrix however few rows it multiplies: for the encoder of one
// short sentence that packing costs more than the products. Below kernels::blas::kGemvRows rows
// this runs one GEMV per row instead. at::linear stays the reference and the path for anything
// else (autograd, other dtypes, more rows).
namespace attnkit::kernels {

// x [..., in], weight [out, in] (rows may be strided, as a narrow() of a wider weight gives),
// bias [out] or undefined -> [..., out].
at::Tensor linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias);

}  // namespace attnkit::kernels
