#include "attnkit/kernels/gemm/packed_linear.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "../cpu/row_parts.h"
#include "int8_gemm.h"
#include "packed_gemm.h"

namespace attnkit::kernels {

using packed::Panels;

namespace {

// Few rows (a decoding step) split the weight's columns when each part still streams at least
// 64 Ki weights (256 KiB in float32): a pool worker takes a part within microseconds
// (part_pool.h).
int64_t default_parts(int64_t rows, int64_t in, int64_t out) {
  return rows >= 8 ? row_parts(rows, 2.0 * rows * in * out)
                   : std::min(row_parts(out), std::max<int64_t>(1, in * out / (int64_t{1} << 16)));
}

}  // namespace

struct PackedLinear::Impl {
  at::Tensor weight, bias;  // [out, in] (rows weight.stride(0) apart), [out] or undefined
  ComputeType type = ComputeType::Float32;
  Panels<float> panels;  // float32
  int8::Panels bytes;    // int8
};

PackedLinear::PackedLinear(const at::Tensor& weight, const at::Tensor& bias, ComputeType type) {
  TORCH_CHECK(weight.dim() == 2 && weight.scalar_type() == at::kFloat && weight.stride(1) == 1,
              "PackedLinear: the weight must be float32 [out, in] with contiguous rows, got ",
              weight.sizes());
  TORCH_CHECK(!bias.defined() || (bias.dim() == 1 && bias.size(0) == weight.size(0) &&
                                  bias.scalar_type() == at::kFloat),
              "PackedLinear: the bias must be float32 [", weight.size(0), "], got ", bias.sizes());
  auto impl = std::make_shared<Impl>();
  impl->weight = weight.detach();
  if (bias.defined()) impl->bias = bias.detach().contiguous();
  impl->type = type;
  const float* w = impl->weight.data_ptr<float>();
  if (type == ComputeType::Int8)
    impl->bytes = int8::Panels::quantize(w, weight.size(0), weight.size(1), weight.stride(0));
  else
    impl->panels =
        Panels<float>::transposed(w, weight.size(0), weight.size(1), weight.stride(0),
                                  {/*scale=*/1, /*parts=*/1, cpu_isa(), /*streamed=*/true});
  impl_ = std::move(impl);
}

int64_t PackedLinear::in() const { return impl_->weight.size(1); }
int64_t PackedLinear::out() const { return impl_->weight.size(0); }
ComputeType PackedLinear::compute_type() const { return impl_->type; }

void PackedLinear::apply(const float* x, int64_t rows, int64_t ldx, float* y, int64_t ldy,
                         bool accumulate, int64_t parts) const {
  const int64_t in = this->in(), out = this->out();
  if (rows <= 0) return;
  const float* bias = impl_->bias.defined() ? impl_->bias.data_ptr<float>() : nullptr;
  if (impl_->type == ComputeType::Int8 && !accumulate) {  // the epilogue adds the bias itself
    impl_->bytes.multiply(x, rows, ldx, bias, y, ldy, /*accumulate=*/false,
                          parts > 0 ? parts : default_parts(rows, in, out));
    return;
  }
  if (parts <= 0) parts = default_parts(rows, in, out);
  if (impl_->type == ComputeType::Float32 && !accumulate) {  // the bias starts each row's sums
    impl_->panels.multiply_parallel(x, rows, ldx, y, ldy, /*accumulate=*/false, /*kstride=*/1,
                                    parts, bias);
    return;
  }
  // Onto what y holds: the bias first, so that every element stays one chain of FMAs whatever
  // the threads.
  if (bias)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < out; ++j) y[r * ldy + j] += bias[j];
  if (impl_->type == ComputeType::Int8)
    impl_->bytes.multiply(x, rows, ldx, /*bias=*/nullptr, y, ldy, /*accumulate=*/true, parts);
  else
    impl_->panels.multiply_parallel(x, rows, ldx, y, ldy, /*accumulate=*/true, /*kstride=*/1,
                                    parts);
}

at::Tensor PackedLinear::operator()(const at::Tensor& x) const {
  const int64_t in = this->in(), out = this->out();
  TORCH_CHECK(x.size(-1) == in && x.scalar_type() == at::kFloat, "PackedLinear: input ", x.sizes(),
              " does not fit a weight of ", in, " inputs");
  const auto xc = x.contiguous();
  const int64_t rows = xc.numel() / in;
  auto sizes = x.sizes().vec();
  sizes.back() = out;
  auto y = at::empty(sizes, x.options());
  apply(xc.data_ptr<float>(), rows, /*ldx=*/in, y.data_ptr<float>(), /*ldy=*/out);
  return y;
}

}  // namespace attnkit::kernels
