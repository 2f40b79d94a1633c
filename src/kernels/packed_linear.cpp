#include "attnkit/kernels/packed_linear.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "packed_gemm.h"
#include "row_parts.h"

namespace attnkit::kernels {

using packed::Panels;

struct PackedLinear::Impl {
  at::Tensor weight, bias;  // [out, in] (rows weight.stride(0) apart), [out] or undefined
  Panels<float> panels;
};

PackedLinear::PackedLinear(const at::Tensor& weight, const at::Tensor& bias) {
  TORCH_CHECK(weight.dim() == 2 && weight.scalar_type() == at::kFloat && weight.stride(1) == 1,
              "PackedLinear: the weight must be float32 [out, in] with contiguous rows, got ",
              weight.sizes());
  auto impl = std::make_shared<Impl>();
  impl->weight = weight.detach();
  if (bias.defined()) impl->bias = bias.detach().contiguous();
  impl->panels = Panels<float>::transposed(impl->weight.data_ptr<float>(), weight.size(0),
                                           weight.size(1), weight.stride(0));
  impl_ = std::move(impl);
}

at::Tensor PackedLinear::operator()(const at::Tensor& x) const {
  const auto& w = impl_->weight;
  const int64_t in = w.size(1), out = w.size(0);
  TORCH_CHECK(x.size(-1) == in && x.scalar_type() == at::kFloat, "PackedLinear: input ", x.sizes(),
              " does not fit a weight of ", in, " inputs");
  const auto xc = x.contiguous();
  const int64_t rows = xc.numel() / in;
  auto sizes = x.sizes().vec();
  sizes.back() = out;
  auto y = at::empty(sizes, x.options());
  float* py = y.data_ptr<float>();
  const bool biased = impl_->bias.defined();
  if (biased)
    for (int64_t r = 0; r < rows; ++r)
      std::copy_n(impl_->bias.data_ptr<float>(), out, py + r * out);
  // Few rows (a decoding step) split the weight's columns when each part still streams at least
  // 64 Ki weights (256 KiB): a pool worker takes a part within microseconds (part_pool.h).
  const int64_t parts =
      rows >= 8 ? row_parts(rows, 2.0 * rows * in * out)
                : std::min(row_parts(out), std::max<int64_t>(1, in * out / (int64_t{1} << 16)));
  impl_->panels.multiply_parallel(xc.data_ptr<float>(), rows, /*ldx=*/in, py, /*ldy=*/out,
                                  /*accumulate=*/biased, /*kstride=*/1, parts);
  return y;
}

}  // namespace attnkit::kernels
