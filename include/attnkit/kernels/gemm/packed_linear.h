#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>

#include "attnkit/kernels/gemm/compute_type.h"

// A linear layer's weight packed once for the inference products that reuse it at every step (a
// decoder's projections and its output layer, an encoder's): y = x W^T + b in float32.
//
// Why it exists: kernels::linear packs the weight on every call, and at a decoding step of a
// beam search (160 rows of 256 against the 2767 x 256 output layer) that packing cost as much as
// the product (26 % against 30 % of a Transformer's beam search in the profile). Packed once per
// set of weights, a step only streams it, whatever the rows: one to three rows take the
// packed product's wide blocks (several panels at once), as fast as a GEMV and independent of
// which kernels OpenBLAS picked for the CPU. The products are src/kernels/packed_gemm.h's, so every
// output element is one sum in ascending k whatever the rows or threads; kernels::linear is the
// reference (tests/test_transformer.cpp holds the packed decoding step to the composite one).
//
// With ComputeType::Int8 the weight is quantized per output row instead and each product
// quantizes its input rows (src/kernels/int8_gemm.h): a quarter of the bytes to stream, which is
// what a decoding step's products wait for, and exact int32 sums, so the results too are the
// same whatever the rows or threads. The float32 product is its reference (tests/test_int8.cpp).
namespace attnkit::kernels {

class PackedLinear {
 public:
  PackedLinear() = default;
  // weight [out, in] float32 (rows may be strided, as a narrow() of a wider weight gives), bias
  // [out] or undefined. Views the weight: it must outlive this and stay unchanged.
  PackedLinear(const at::Tensor& weight, const at::Tensor& bias,
               ComputeType type = ComputeType::Float32);
  // x [..., in] float32 -> [..., out]; no autograd.
  at::Tensor operator()(const at::Tensor& x) const;

  // The same on raw rows: y[rows, out] = x[rows, in] W^T + b (+ y's values when accumulate), x
  // rows ldx apart, y rows ldy apart. `parts` threads (row_parts.h): 0 takes the default for the
  // size, split by rows or, with too few rows, by the weight's columns; 1 stays on this thread.
  void apply(const float* x, int64_t rows, int64_t ldx, float* y, int64_t ldy,
             bool accumulate = false, int64_t parts = 0) const;

  bool defined() const { return impl_ != nullptr; }
  int64_t in() const;
  int64_t out() const;
  ComputeType compute_type() const;

  struct Impl;

 private:
  std::shared_ptr<const Impl> impl_;
};

}  // namespace attnkit::kernels
