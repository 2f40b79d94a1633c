#include "attnkit/kernels/dropout.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Dispatch.h>
#include <torch/csrc/autograd/custom_function.h>

#include <mutex>

namespace attnkit::kernels {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

uint64_t splitmix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// out[i] = in[i] * scale where element i is kept, else 0. One hash gives two 32-bit draws.
template <typename T>
void apply_mask(const T* in, T* out, int64_t n, uint64_t seed, double p, T scale) {
  const uint64_t threshold = static_cast<uint64_t>(p * 4294967296.0);  // keep if draw >= it
  for (int64_t i = 0; i < n; i += 2) {
    const uint64_t h = splitmix64(seed ^ static_cast<uint64_t>(i >> 1) * 0xd1342543de82ef95ULL);
    out[i] = (h & 0xffffffffULL) >= threshold ? in[i] * scale : T(0);
    if (i + 1 < n) out[i + 1] = (h >> 32) >= threshold ? in[i + 1] * scale : T(0);
  }
}

class Dropout : public torch::autograd::Function<Dropout> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, double p) {
    uint64_t seed;
    {
      auto gen = at::detail::getDefaultCPUGenerator();
      std::lock_guard<std::mutex> lock(gen.mutex());
      seed = gen.get<at::CPUGeneratorImpl>()->random64();
    }
    auto out = at::empty_like(x);
    AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "dropout", [&] {
      apply_mask<scalar_t>(x.data_ptr<scalar_t>(), out.data_ptr<scalar_t>(), x.numel(), seed, p,
                           static_cast<scalar_t>(1.0 / (1.0 - p)));
    });
    ctx->saved_data["seed"] = static_cast<int64_t>(seed);
    ctx->saved_data["p"] = p;
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto seed = static_cast<uint64_t>(ctx->saved_data["seed"].toInt());
    const double p = ctx->saved_data["p"].toDouble();
    const auto g = grads[0].contiguous();
    auto dx = at::empty_like(g);
    AT_DISPATCH_FLOATING_TYPES(g.scalar_type(), "dropout_backward", [&] {
      apply_mask<scalar_t>(g.data_ptr<scalar_t>(), dx.data_ptr<scalar_t>(), g.numel(), seed, p,
                           static_cast<scalar_t>(1.0 / (1.0 - p)));
    });
    return {dx, {}};
  }
};

}  // namespace

at::Tensor dropout(const at::Tensor& x, double p, bool training) {
  TORCH_CHECK(p >= 0 && p <= 1, "dropout: p must be in [0, 1], got ", p);
  if (!training || p == 0) return x;
  if (p == 1) return x * 0;
  return Dropout::apply(x.contiguous(), p);
}

}  // namespace attnkit::kernels
