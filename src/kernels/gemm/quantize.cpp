#include "attnkit/kernels/gemm/quantize.h"

#include <ATen/ATen.h>

#include "int8_gemm.h"

namespace attnkit::kernels {

QuantizedRows quantize_rows(const at::Tensor& w) {
  TORCH_CHECK(w.dim() == 2 && w.scalar_type() == at::kFloat,
              "quantize_rows: a float32 matrix, got ", w.sizes(), " ", w.scalar_type());
  const auto x = w.contiguous();
  QuantizedRows q{at::empty(w.sizes(), at::kChar), at::empty({w.size(0)}, at::kFloat)};
  int8::quantize_rows(x.data_ptr<float>(), w.size(0), w.size(1), /*ldx=*/w.size(1),
                      q.values.data_ptr<int8_t>(), q.scales.data_ptr<float>());
  return q;
}

at::Tensor dequantize_rows(const QuantizedRows& q) {
  TORCH_CHECK(q.values.dim() == 2 && q.values.scalar_type() == at::kChar && q.scales.dim() == 1 &&
                  q.scales.size(0) == q.values.size(0) && q.scales.scalar_type() == at::kFloat,
              "dequantize_rows: int8 [rows, cols] with float32 [rows] scales, got ",
              q.values.sizes(), " and ", q.scales.sizes());
  return q.values.to(at::kFloat) * q.scales.unsqueeze(1);
}

}  // namespace attnkit::kernels
