#include "attnkit/kernels/ops/dropout.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Dispatch.h>
#include <ATen/record_function.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <mutex>
#include <optional>

#include "../cpu/row_parts.h"
#include "../cpu/simd.h"

namespace attnkit::kernels {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Element i's draw: a 32-bit integer hash (Wellons' lowbias32) of i, keyed by the call's 64-bit
// seed. 32-bit lanes, so eight draws per AVX2 instruction and sixteen per AVX-512 one; the scalar
// path computes the same draws, so a seed gives the same mask on any CPU and in any part.
struct Key {
  uint32_t lo, hi;
  explicit Key(uint64_t seed)
      : lo(static_cast<uint32_t>(seed)), hi(static_cast<uint32_t>(seed >> 32)) {}
};

// The hash's constants, for the scalar, AVX2 and AVX-512 bodies alike: each width writes the same
// steps with its own instructions (GCC inlines intrinsics only into a function built for their
// ISA, so the bodies cannot be one template), and DropoutKernel's tests hold the vector masks to
// the scalar (double) ones under every ISA.
constexpr uint32_t kGolden = 0x9e3779b9u, kMul1 = 0x7feb352du, kMul2 = 0x846ca68bu;
constexpr unsigned kShift1 = 16, kShift2 = 15, kShift3 = 16;

inline uint32_t draw(uint32_t i, Key k) {
  uint32_t x = (i * kGolden + k.lo) ^ k.hi;
  x ^= x >> kShift1;
  x *= kMul1;
  x ^= x >> kShift2;
  x *= kMul2;
  return x ^ (x >> kShift3);
}

// One call's mask: element i is kept where its draw >= threshold (p * 2^32), and kept elements
// are scaled by 1 / (1 - p). With `relu`, an element must also be above zero (NaN passes, as
// through at::relu): ReLU and the dropout after it in one pass.
struct Mask {
  Key key;
  uint32_t threshold;
  bool relu;
};

// out = (base +) the masked input; `base` (null for none) is the residual stream a sublayer's
// dropped-out output joins, added after the scaling as base + dropout(in) adds it.
template <typename T>
void apply_mask_scalar(const T* in, const T* base, T* out, int64_t from, int64_t to, const Mask& m,
                       T scale) {
  for (int64_t i = from; i < to; ++i) {
    const bool kept =
        draw(static_cast<uint32_t>(i), m.key) >= m.threshold && !(m.relu && in[i] <= 0);
    const T dropped = kept ? in[i] * scale : T(0);
    out[i] = base ? base[i] + dropped : dropped;
  }
}

__attribute__((target("avx2,fma"))) void apply_mask_avx2(const float* in, const float* base,
                                                         float* out, int64_t from, int64_t to,
                                                         const Mask& m, float scale) {
  const __m256i step = _mm256_set1_epi32(8), golden = _mm256_set1_epi32(static_cast<int>(kGolden)),
                lo = _mm256_set1_epi32(static_cast<int>(m.key.lo)),
                hi = _mm256_set1_epi32(static_cast<int>(m.key.hi)),
                m1 = _mm256_set1_epi32(static_cast<int>(kMul1)),
                m2 = _mm256_set1_epi32(static_cast<int>(kMul2)),
                // unsigned x >= t as signed (x ^ 2^31) >= (t ^ 2^31), i.e. not (t' > x')
      flip = _mm256_set1_epi32(INT32_MIN),
                t = _mm256_xor_si256(_mm256_set1_epi32(static_cast<int>(m.threshold)), flip);
  const __m256 vs = _mm256_set1_ps(scale), zero = _mm256_setzero_ps();
  __m256i idx = _mm256_add_epi32(_mm256_set1_epi32(static_cast<int>(from)),
                                 _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  int64_t i = from;
  for (; i + 8 <= to; i += 8, idx = _mm256_add_epi32(idx, step)) {
    __m256i x = _mm256_xor_si256(_mm256_add_epi32(_mm256_mullo_epi32(idx, golden), lo), hi);
    x = _mm256_xor_si256(x, _mm256_srli_epi32(x, kShift1));
    x = _mm256_mullo_epi32(x, m1);
    x = _mm256_xor_si256(x, _mm256_srli_epi32(x, kShift2));
    x = _mm256_mullo_epi32(x, m2);
    x = _mm256_xor_si256(x, _mm256_srli_epi32(x, kShift3));
    __m256 dropped = _mm256_castsi256_ps(_mm256_cmpgt_epi32(t, _mm256_xor_si256(x, flip)));
    const __m256 v = _mm256_loadu_ps(in + i);
    if (m.relu) dropped = _mm256_or_ps(dropped, _mm256_cmp_ps(v, zero, _CMP_LE_OQ));
    __m256 y = _mm256_andnot_ps(dropped, _mm256_mul_ps(v, vs));
    if (base) y = _mm256_add_ps(_mm256_loadu_ps(base + i), y);
    _mm256_storeu_ps(out + i, y);
  }
  apply_mask_scalar<float>(in, base, out, i, to, m, scale);
}

// x >> n with a zeroing mask: GCC 12's plain _mm512_srli_epi32 warns of an uninitialised operand
// of its own.
__attribute__((target("avx512f"))) inline __m512i shift(__m512i x, unsigned n) {
  return _mm512_maskz_srli_epi32(0xffff, x, n);
}

__attribute__((target("avx512f"))) void apply_mask_avx512(const float* in, const float* base,
                                                          float* out, int64_t from, int64_t to,
                                                          const Mask& m, float scale) {
  const __m512i step = _mm512_set1_epi32(16), golden = _mm512_set1_epi32(static_cast<int>(kGolden)),
                lo = _mm512_set1_epi32(static_cast<int>(m.key.lo)),
                hi = _mm512_set1_epi32(static_cast<int>(m.key.hi)),
                m1 = _mm512_set1_epi32(static_cast<int>(kMul1)),
                m2 = _mm512_set1_epi32(static_cast<int>(kMul2)),
                t = _mm512_set1_epi32(static_cast<int>(m.threshold));
  const __m512 vs = _mm512_set1_ps(scale), zero = _mm512_setzero_ps();
  __m512i idx =
      _mm512_add_epi32(_mm512_set1_epi32(static_cast<int>(from)),
                       _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
  int64_t i = from;
  for (; i + 16 <= to; i += 16, idx = _mm512_add_epi32(idx, step)) {
    __m512i x = _mm512_xor_si512(_mm512_add_epi32(_mm512_mullo_epi32(idx, golden), lo), hi);
    x = _mm512_xor_si512(x, shift(x, kShift1));
    x = _mm512_mullo_epi32(x, m1);
    x = _mm512_xor_si512(x, shift(x, kShift2));
    x = _mm512_mullo_epi32(x, m2);
    x = _mm512_xor_si512(x, shift(x, kShift3));
    __mmask16 kept = _mm512_cmpge_epu32_mask(x, t);
    const __m512 v = _mm512_loadu_ps(in + i);
    if (m.relu) kept &= _mm512_cmp_ps_mask(v, zero, _CMP_NLE_UQ);
    __m512 y = _mm512_maskz_mul_ps(kept, v, vs);
    if (base) y = _mm512_add_ps(_mm512_loadu_ps(base + i), y);
    _mm512_storeu_ps(out + i, y);
  }
  apply_mask_scalar<float>(in, base, out, i, to, m, scale);
}

// out[i] = g[i] * scale where y[i] > 0, else 0: the backward pass of ReLU + dropout from its
// output (an element is above zero exactly where it was kept and its input was above zero).
template <typename T>
void relu_mask_backward_scalar(const T* g, const T* y, T* out, int64_t from, int64_t to, T scale) {
  for (int64_t i = from; i < to; ++i) out[i] = y[i] > 0 ? g[i] * scale : T(0);
}

__attribute__((target("avx512f"))) void relu_mask_backward_avx512(const float* g, const float* y,
                                                                  float* out, int64_t from,
                                                                  int64_t to, float scale) {
  const __m512 vs = _mm512_set1_ps(scale), zero = _mm512_setzero_ps();
  int64_t i = from;
  for (; i + 16 <= to; i += 16) {
    const __mmask16 above = _mm512_cmp_ps_mask(_mm512_loadu_ps(y + i), zero, _CMP_GT_OQ);
    _mm512_storeu_ps(out + i, _mm512_maskz_mul_ps(above, _mm512_loadu_ps(g + i), vs));
  }
  relu_mask_backward_scalar<float>(g, y, out, i, to, scale);
}

__attribute__((target("avx2,fma"))) void relu_mask_backward_avx2(const float* g, const float* y,
                                                                 float* out, int64_t from,
                                                                 int64_t to, float scale) {
  const __m256 vs = _mm256_set1_ps(scale), zero = _mm256_setzero_ps();
  int64_t i = from;
  for (; i + 8 <= to; i += 8) {
    const __m256 above = _mm256_cmp_ps(_mm256_loadu_ps(y + i), zero, _CMP_GT_OQ);
    _mm256_storeu_ps(out + i, _mm256_and_ps(above, _mm256_mul_ps(_mm256_loadu_ps(g + i), vs)));
  }
  relu_mask_backward_scalar<float>(g, y, out, i, to, scale);
}

template <typename T>
void apply_mask(const T* in, T* out, int64_t n, const Mask& m, T scale, const T* base = nullptr) {
  TORCH_CHECK(n <= (int64_t{1} << 32), "dropout: at most 2^32 elements per tensor");
  for_each_range(n, [&](int64_t from, int64_t to) {
    if constexpr (std::is_same_v<T, float>) {
      if (cpu_isa() == Isa::Avx512) return apply_mask_avx512(in, base, out, from, to, m, scale);
      if (cpu_isa() == Isa::Avx2) return apply_mask_avx2(in, base, out, from, to, m, scale);
    }
    apply_mask_scalar<T>(in, base, out, from, to, m, scale);
  });
}

template <typename T>
void relu_mask_backward(const T* g, const T* y, T* out, int64_t n, T scale) {
  for_each_range(n, [&](int64_t from, int64_t to) {
    if constexpr (std::is_same_v<T, float>) {
      if (cpu_isa() == Isa::Avx512) return relu_mask_backward_avx512(g, y, out, from, to, scale);
      if (cpu_isa() == Isa::Avx2) return relu_mask_backward_avx2(g, y, out, from, to, scale);
    }
    relu_mask_backward_scalar<T>(g, y, out, from, to, scale);
  });
}

uint32_t threshold(double p) {
  return static_cast<uint32_t>(std::min(p * 4294967296.0, 4294967295.0));
}

// This thread's DropoutSeedStream, if one lives: the seed its next draw starts from.
std::optional<uint64_t>& thread_stream() {
  thread_local std::optional<uint64_t> state;
  return state;
}

// splitmix64 (Steele, Lea and Flood 2014): a stream of well-mixed 64-bit seeds from a counter.
uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// The next call's seed: from this thread's DropoutSeedStream, or else from LibTorch's default
// generator (at::manual_seed and the checkpointed RNG state govern it).
uint64_t next_seed() {
  if (auto& stream = thread_stream()) return splitmix64(*stream);
  auto gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get<at::CPUGeneratorImpl>()->random64();
}

// (base +) in's dropout with the given seed, in a new tensor: the forward pass of a dropout (its
// input), and its backward pass (the gradient, which the same mask routes).
at::Tensor dropped(const at::Tensor& in, uint64_t seed, double p, const at::Tensor& base = {}) {
  auto out = at::empty_like(in);
  AT_DISPATCH_FLOATING_TYPES(in.scalar_type(), "dropout", [&] {
    apply_mask<scalar_t>(in.data_ptr<scalar_t>(), out.data_ptr<scalar_t>(), in.numel(),
                         {Key(seed), threshold(p), /*relu=*/false},
                         static_cast<scalar_t>(1.0 / (1.0 - p)),
                         base.defined() ? base.data_ptr<scalar_t>() : nullptr);
  });
  return out;
}

class Dropout : public torch::autograd::Function<Dropout> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, double p) {
    RECORD_FUNCTION("attnkit::dropout", std::vector<c10::IValue>());
    const uint64_t seed = next_seed();
    ctx->saved_data["seed"] = static_cast<int64_t>(seed);
    ctx->saved_data["p"] = p;
    return dropped(x, seed, p);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto seed = static_cast<uint64_t>(ctx->saved_data["seed"].toInt());
    const double p = ctx->saved_data["p"].toDouble();
    return {dropped(grads[0].contiguous(), seed, p), {}};
  }
};

// ReLU then dropout, one pass each way. The backward pass reads the saved output instead of
// rehashing: no [x] kept, and no second ReLU mask.
class ReluDropout : public torch::autograd::Function<ReluDropout> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, double p) {
    RECORD_FUNCTION("attnkit::relu_dropout", std::vector<c10::IValue>());
    // p = 0 (no dropout, every draw kept): no seed drawn, so the stream is the one a plain ReLU
    // would leave.
    const Mask mask{Key(p > 0 ? next_seed() : 0), threshold(p), /*relu=*/true};
    auto out = at::empty_like(x);
    AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "relu_dropout", [&] {
      apply_mask<scalar_t>(x.data_ptr<scalar_t>(), out.data_ptr<scalar_t>(), x.numel(), mask,
                           static_cast<scalar_t>(1.0 / (1.0 - p)));
    });
    ctx->save_for_backward({out});
    ctx->saved_data["p"] = p;
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto y = ctx->get_saved_variables()[0];
    const double p = ctx->saved_data["p"].toDouble();
    const auto g = grads[0].contiguous();
    auto dx = at::empty_like(g);
    AT_DISPATCH_FLOATING_TYPES(g.scalar_type(), "relu_dropout_backward", [&] {
      relu_mask_backward<scalar_t>(g.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(),
                                   dx.data_ptr<scalar_t>(), g.numel(),
                                   static_cast<scalar_t>(1.0 / (1.0 - p)));
    });
    return {dx, {}};
  }
};

// The residual stream's x + dropout(y), one pass each way. The backward pass hands the stream's
// gradient to x as it is and the masked one to y.
class AddDropout : public torch::autograd::Function<AddDropout> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& y,
                            double p) {
    RECORD_FUNCTION("attnkit::add_dropout", std::vector<c10::IValue>());
    // p = 0: every draw kept and no seed drawn, as kernels::dropout draws none.
    const uint64_t seed = p > 0 ? next_seed() : 0;
    ctx->saved_data["seed"] = static_cast<int64_t>(seed);
    ctx->saved_data["p"] = p;
    return dropped(y, seed, p, x);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto seed = static_cast<uint64_t>(ctx->saved_data["seed"].toInt());
    const double p = ctx->saved_data["p"].toDouble();
    const auto g = grads[0].contiguous();
    return {g, p == 0 ? g : dropped(g, seed, p), {}};
  }
};

void check_p(double p) { TORCH_CHECK(p >= 0 && p <= 1, "dropout: p must be in [0, 1], got ", p); }

bool fusable(const at::Tensor& x) {
  return x.device().is_cpu() && (x.scalar_type() == at::kFloat || x.scalar_type() == at::kDouble);
}

}  // namespace

uint64_t next_dropout_seed() { return next_seed(); }

DropoutSeedStream::DropoutSeedStream(uint64_t seed) {
  TORCH_CHECK(!thread_stream(), "DropoutSeedStream: one already lives on this thread");
  thread_stream() = seed;
}

DropoutSeedStream::~DropoutSeedStream() { thread_stream().reset(); }

at::Tensor dropout(const at::Tensor& x, double p, bool training) {
  check_p(p);
  if (!training || p == 0) return x;
  if (p == 1) return x * 0;
  return Dropout::apply(x.contiguous(), p);
}

at::Tensor add_dropout(const at::Tensor& x, const at::Tensor& y, double p, bool training) {
  check_p(p);
  if (!training) p = 0;
  if (p == 1 || !fusable(y) || x.sizes() != y.sizes() || x.scalar_type() != y.scalar_type())
    return x + kernels::dropout(y, p, training);
  return AddDropout::apply(x.contiguous(), y.contiguous(), p);
}

at::Tensor relu_dropout(const at::Tensor& x, double p, bool training) {
  check_p(p);
  if (!training) p = 0;
  if (p == 1) return x * 0;
  // Inference needs no backward pass: at::relu is one pass too.
  if (!fusable(x) || (p == 0 && !(at::GradMode::is_enabled() && x.requires_grad())))
    return kernels::dropout(at::relu(x), p, training);
  return ReluDropout::apply(x.contiguous(), p);
}

}  // namespace attnkit::kernels
