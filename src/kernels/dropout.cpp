#include "attnkit/kernels/dropout.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Dispatch.h>
#include <ATen/record_function.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <mutex>

#include "simd.h"

namespace attnkit::kernels {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Element i's draw: a 32-bit integer hash (Wellons' lowbias32) of i, keyed by the call's 64-bit
// seed. 32-bit lanes, so eight draws per AVX2 instruction; the scalar path computes the same
// draws, so a seed gives the same mask on any CPU.
struct Key {
  uint32_t lo, hi;
  explicit Key(uint64_t seed)
      : lo(static_cast<uint32_t>(seed)), hi(static_cast<uint32_t>(seed >> 32)) {}
};

inline uint32_t draw(uint32_t i, Key k) {
  uint32_t x = (i * 0x9e3779b9u + k.lo) ^ k.hi;
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  return x ^ (x >> 16);
}

// out[i] = in[i] * scale where element i is kept (draw >= p * 2^32), else 0.
template <typename T>
void apply_mask_scalar(const T* in, T* out, int64_t from, int64_t n, Key k, uint32_t threshold,
                       T scale) {
  for (int64_t i = from; i < n; ++i)
    out[i] = draw(static_cast<uint32_t>(i), k) >= threshold ? in[i] * scale : T(0);
}

__attribute__((target("avx2,fma"))) void apply_mask_avx2(const float* in, float* out, int64_t n,
                                                         Key k, uint32_t threshold, float scale) {
  const __m256i step = _mm256_set1_epi32(8), golden = _mm256_set1_epi32(0x9e3779b9),
                lo = _mm256_set1_epi32(static_cast<int>(k.lo)),
                hi = _mm256_set1_epi32(static_cast<int>(k.hi)), m1 = _mm256_set1_epi32(0x7feb352d),
                m2 = _mm256_set1_epi32(0x846ca68b),
                // unsigned x >= t as signed (x ^ 2^31) >= (t ^ 2^31), i.e. not (t' > x')
      flip = _mm256_set1_epi32(INT32_MIN),
                t = _mm256_xor_si256(_mm256_set1_epi32(static_cast<int>(threshold)), flip);
  const __m256 vs = _mm256_set1_ps(scale);
  __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8, idx = _mm256_add_epi32(idx, step)) {
    __m256i x = _mm256_xor_si256(_mm256_add_epi32(_mm256_mullo_epi32(idx, golden), lo), hi);
    x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 16));
    x = _mm256_mullo_epi32(x, m1);
    x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 15));
    x = _mm256_mullo_epi32(x, m2);
    x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 16));
    const __m256i dropped = _mm256_cmpgt_epi32(t, _mm256_xor_si256(x, flip));
    const __m256 kept = _mm256_mul_ps(_mm256_loadu_ps(in + i), vs);
    _mm256_storeu_ps(out + i, _mm256_andnot_ps(_mm256_castsi256_ps(dropped), kept));
  }
  apply_mask_scalar<float>(in, out, i, n, k, threshold, scale);
}

template <typename T>
void apply_mask(const T* in, T* out, int64_t n, uint64_t seed, double p, T scale) {
  TORCH_CHECK(n <= (int64_t{1} << 32), "dropout: at most 2^32 elements per tensor");
  const auto threshold = static_cast<uint32_t>(std::min(p * 4294967296.0, 4294967295.0));
  if constexpr (std::is_same_v<T, float>) {
    if (simd::use_avx2()) return apply_mask_avx2(in, out, n, Key(seed), threshold, scale);
  }
  apply_mask_scalar<T>(in, out, 0, n, Key(seed), threshold, scale);
}

class Dropout : public torch::autograd::Function<Dropout> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, double p) {
    RECORD_FUNCTION("attnkit::dropout", std::vector<c10::IValue>());
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
