#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <utility>

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

// {linear(x1, weight[0, rows), bias[0, rows)), linear(x2, weight[rows, out), bias[rows, out))}:
// two inputs through the two row blocks of one weight, as a cross-attention projects its queries
// (from the decoder) and its keys and values (from the encoder) with one in_proj_weight. One
// autograd node, whose backward pass writes both blocks of the weight's (and bias's) gradient
// into one tensor. With linear() on two narrows of the weight, LibTorch's slice backward
// zero-fills a full-size gradient for each block and its engine adds the two, on one thread.
// The same values and gradients as the two calls; weight [out, in] contiguous.
std::pair<at::Tensor, at::Tensor> linear_blocks(const at::Tensor& x1, const at::Tensor& x2,
                                                const at::Tensor& weight, const at::Tensor& bias,
                                                int64_t rows);

}  // namespace attnkit::kernels
