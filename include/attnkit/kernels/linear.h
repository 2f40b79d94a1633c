#pragma once

#include <ATen/core/Tensor.h>

// at::linear on float32 CPU tensors without its two detours:
//  - addmm starts by copying the bias into every output row through a broadcasting
//    TensorIterator copy: 1.8 ms of a training step for the output layer's [N, 2782] logits.
//    Here each row starts as a memcpy of the bias and GEMM accumulates onto it, with or
//    without autograd (the backward is two GEMMs and a column sum).
//  - below kernels::blas::kGemvRows rows (inference), GEMM packs the whole weight matrix
//    however few rows it multiplies: for the encoder of one short sentence that packing costs
//    more than the products, so each row is one GEMV instead.
// at::linear stays the reference and the path for anything else (other dtypes and devices).
namespace attnkit::kernels {

// x [..., in], weight [out, in] (rows may be strided, as a narrow() of a wider weight gives),
// bias [out] or undefined -> [..., out].
at::Tensor linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias);

}  // namespace attnkit::kernels
