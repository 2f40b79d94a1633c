#pragma once

#include <ATen/core/Tensor.h>

// A matrix in int8 with a scale per row, as an int8 model directory stores its weights and as the
// int8 products hold them (src/kernels/int8_gemm.h): row r becomes q = round(r * 127 / max|r|)
// in [-127, 127] and s = max|r| / 127, so that |r - s q| <= s / 2 elementwise.
namespace attnkit::kernels {

struct QuantizedRows {
  at::Tensor values;  // [rows, cols] int8
  at::Tensor scales;  // [rows] float32
};

// w [rows, cols] float32 -> its int8 rows and scales (an all-zero row: zeros and scale 0).
QuantizedRows quantize_rows(const at::Tensor& w);
// The float32 matrix they stand for: values * scales, row by row.
at::Tensor dequantize_rows(const QuantizedRows& q);

}  // namespace attnkit::kernels
