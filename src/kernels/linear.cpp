#include "attnkit/kernels/linear.h"

#include <ATen/ATen.h>

#include "blas.h"

namespace attnkit::kernels {

at::Tensor linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  const int64_t in = x.size(-1), rows = in > 0 ? x.numel() / in : 0;
  const bool needs_grad =
      at::GradMode::is_enabled() &&
      (x.requires_grad() || weight.requires_grad() || (bias.defined() && bias.requires_grad()));
  const bool fast =
      !needs_grad && rows > 0 && rows < blas::kGemvRows && x.scalar_type() == at::kFloat &&
      weight.scalar_type() == at::kFloat && x.device().is_cpu() && weight.device().is_cpu() &&
      weight.dim() == 2 && weight.size(1) == in && weight.stride(1) == 1 &&
      (!bias.defined() ||
       (bias.scalar_type() == at::kFloat && bias.dim() == 1 && bias.size(0) == weight.size(0)));
  if (!fast) return at::linear(x, weight, bias);
  const int64_t out = weight.size(0);
  const auto xc = x.contiguous();
  auto sizes = x.sizes().vec();
  sizes.back() = out;
  auto y = at::empty(sizes, x.options());
  const auto b = bias.defined() ? bias.contiguous() : at::Tensor();
  blas::affine(xc.data_ptr<float>(), static_cast<int>(rows), static_cast<int>(in),
               weight.data_ptr<float>(), static_cast<int>(out),
               b.defined() ? b.data_ptr<float>() : nullptr, y.data_ptr<float>(),
               static_cast<int>(weight.stride(0)));
  return y;
}

}  // namespace attnkit::kernels
