#include "attnkit/kernels/gemm/matmul.h"

#include <ATen/ATen.h>

#include "../cpu/row_parts.h"
#include "packed_gemm.h"

namespace attnkit::kernels {

void matmul(const at::Tensor& a, const at::Tensor& b, at::Tensor& out) {
  TORCH_CHECK(a.dim() == 2 && b.dim() == 2 && a.size(1) == b.size(0), "matmul: a ", a.sizes(),
              " and b ", b.sizes(), " do not multiply");
  TORCH_CHECK(a.scalar_type() == at::kFloat && b.scalar_type() == at::kFloat &&
                  out.scalar_type() == at::kFloat && a.is_contiguous() && b.is_contiguous() &&
                  out.is_contiguous(),
              "matmul: float32 contiguous tensors only");
  const int64_t m = a.size(0), k = a.size(1), n = b.size(1);
  TORCH_CHECK(out.dim() == 2 && out.size(0) == m && out.size(1) == n, "matmul: out ", out.sizes(),
              " must be [", m, ", ", n, "]");
  const int64_t parts = row_parts(m);
  packed::PackOptions options;
  options.parts = parts;
  packed::Panels<float>::plain(b.data_ptr<float>(), k, n, /*ldb=*/n, options)
      .multiply_parallel(a.data_ptr<float>(), m, /*ldx=*/k, out.data_ptr<float>(), /*ldy=*/n,
                         /*accumulate=*/false, /*kstride=*/1, parts);
}

}  // namespace attnkit::kernels
