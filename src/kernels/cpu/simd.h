#pragma once

// Private to src/kernels: the vectorised elementwise pieces (AVX2 + FMA). Each op has a scalar
// loop (`*_scalar`, a template: float and double), which is also its vector version's tail, and a
// dispatching entry for both types that runs the float vector loop when cpu_isa() allows
// (kernels/cpu_isa.h: one switch for every kernel). Kernels that also run in double (for the
// finite-difference tests) call the entries with either type.

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "attnkit/kernels/cpu/cpu_isa.h"

namespace attnkit::kernels::simd {

// Whether the AVX2 + FMA loops may run (every ISA above Scalar has them).
inline bool use_avx2() { return cpu_isa() != Isa::Scalar; }

// The constants of exp256 and exp512, in one place: the two bodies are the same operations at two
// register widths (a body cannot be shared: GCC inlines intrinsics only into a function built for
// their ISA, and a template built for AVX-512 may emit AVX-512 instructions into the AVX2 path),
// and CpuIsa.Avx512ExponentialsHaveTheAvx2Bits holds them to the same bits.
namespace exp_poly {
constexpr float kHi = 88.3762626647949f, kLo = -87.3f;  // the clamp; below kLo: exactly 0
constexpr float kLog2e = 1.44269504088896341f;
constexpr float kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;  // ln 2 in two parts
// Cephes' polynomial, highest degree first (Horner).
constexpr float kP[6] = {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f,
                         4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f};
}  // namespace exp_poly

// 2^n for integer-valued n in [-126, 127], built from its exponent bits.
__attribute__((target("avx2,fma"))) inline __m256 pow2_256(__m256 n) {
  return _mm256_castsi256_ps(
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvttps_epi32(n), _mm256_set1_epi32(127)), 23));
}

// exp(x) for 8 floats (Cephes' polynomial after a base-2 range reduction); inputs below -87.3
// (including -inf) give exactly 0.
__attribute__((target("avx2,fma"))) inline __m256 exp256(__m256 x) {
  using namespace exp_poly;
  const __m256 hi = _mm256_set1_ps(kHi), lo = _mm256_set1_ps(kLo);
  const __m256 underflow = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
  x = _mm256_min_ps(_mm256_max_ps(x, lo), hi);
  __m256 fx = _mm256_floor_ps(_mm256_fmadd_ps(x, _mm256_set1_ps(kLog2e), _mm256_set1_ps(0.5f)));
  x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(kLn2Hi), x);
  x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(kLn2Lo), x);
  __m256 y = _mm256_set1_ps(kP[0]);
#pragma GCC unroll 8
  for (int c = 1; c < 6; ++c) y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(kP[c]));
  y = _mm256_fmadd_ps(y, _mm256_mul_ps(x, x), _mm256_add_ps(x, _mm256_set1_ps(1.0f)));
  return _mm256_andnot_ps(underflow, _mm256_mul_ps(y, pow2_256(fx)));
}

// exp256 on 16 floats, lane for lane the same operations up to the scaling by 2^fx (below), so
// the same bits. The zero-masked forms of min, max and floor: GCC 12's plain forms warn of an
// uninitialised operand of their own.
__attribute__((target("avx512f"))) inline __m512 exp512(__m512 x) {
  using namespace exp_poly;
  constexpr __mmask16 all = 0xffff;
  const __m512 hi = _mm512_set1_ps(kHi), lo = _mm512_set1_ps(kLo);
  const __mmask16 underflow = _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ);
  x = _mm512_maskz_min_ps(all, _mm512_maskz_max_ps(all, x, lo), hi);
  __m512 fx = _mm512_maskz_roundscale_ps(
      all, _mm512_fmadd_ps(x, _mm512_set1_ps(kLog2e), _mm512_set1_ps(0.5f)),
      _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
  x = _mm512_fnmadd_ps(fx, _mm512_set1_ps(kLn2Hi), x);
  x = _mm512_fnmadd_ps(fx, _mm512_set1_ps(kLn2Lo), x);
  __m512 y = _mm512_set1_ps(kP[0]);
#pragma GCC unroll 8
  for (int c = 1; c < 6; ++c) y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(kP[c]));
  y = _mm512_fmadd_ps(y, _mm512_mul_ps(x, x), _mm512_add_ps(x, _mm512_set1_ps(1.0f)));
  // y 2^fx in one instruction where exp256 builds 2^fx's bits (convert, add, shift) and
  // multiplies: both are exact (fx is an integer in [-126, 127]: the clamp's ends give -126 and,
  // after the fused multiply-add's one rounding, 127.99999, so 127), so the bits are the same.
  return _mm512_maskz_scalef_ps(static_cast<__mmask16>(~underflow), y, fx);
}

// 2^x: what the fused attention kernel's long rows take, their scores being in base 2 (scaled by
// log2 e where K is packed), so the exponential needs no multiply by log2 e and no two-part
// subtraction of ln 2: x = n + r, n = round(x), r in [-0.5, 0.5], 2^x = 2^n (1 + r q(r)). Eleven
// floating-point operations a vector against exp's seventeen. q is this project's own fit of
// degree 4 (relative error weighted least squares on [-0.5, 0.5], coefficients rounded to float);
// with float fused multiply-adds the result is within 2 ulp of 2^x, 1.6e-7 relative
// (CpuIsa.BaseTwoExponentialsAreWithinTwoUlpOnEveryIsa). Inputs below -126 (including -inf) give
// exactly 0; inputs above 127 are taken as 127.
namespace exp2_poly {
constexpr float kHi = 127.f, kLo = -126.f;
constexpr float kQ[5] = {1.3268215e-3f, 9.6715111e-3f, 5.5507217e-2f, 2.4022242e-1f,
                         6.9314700e-1f};  // highest degree first (Horner)
}  // namespace exp2_poly

__attribute__((target("avx2,fma"))) inline __m256 exp2_256(__m256 x) {
  using namespace exp2_poly;
  const __m256 underflow = _mm256_cmp_ps(x, _mm256_set1_ps(kLo), _CMP_LT_OQ);
  x = _mm256_min_ps(x, _mm256_set1_ps(kHi));
  const __m256 n = _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256 r = _mm256_sub_ps(x, n);
  __m256 y = _mm256_set1_ps(kQ[0]);
#pragma GCC unroll 8
  for (int c = 1; c < 5; ++c) y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(kQ[c]));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.0f));
  return _mm256_andnot_ps(underflow, _mm256_mul_ps(y, pow2_256(n)));
}

// exp2_256 on 16 floats, with scalef for the product by 2^n (exact, as exp512's): the same bits.
__attribute__((target("avx512f"))) inline __m512 exp2_512(__m512 x) {
  using namespace exp2_poly;
  constexpr __mmask16 all = 0xffff;
  const __mmask16 underflow = _mm512_cmp_ps_mask(x, _mm512_set1_ps(kLo), _CMP_LT_OQ);
  x = _mm512_maskz_min_ps(all, x, _mm512_set1_ps(kHi));
  const __m512 n =
      _mm512_maskz_roundscale_ps(all, x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 r = _mm512_sub_ps(x, n);
  __m512 y = _mm512_set1_ps(kQ[0]);
#pragma GCC unroll 8
  for (int c = 1; c < 5; ++c) y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(kQ[c]));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.0f));
  return _mm512_maskz_scalef_ps(static_cast<__mmask16>(~underflow), y, n);
}

// tanh(x) = 1 - 2 / (exp(2x) + 1), exact at the saturated ends and without cancellation near 0
// beyond float precision.
__attribute__((target("avx2,fma"))) inline __m256 tanh256(__m256 x) {
  const __m256 one = _mm256_set1_ps(1.f);
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-9.f)), _mm256_set1_ps(9.f));
  const __m256 e = exp256(_mm256_add_ps(x, x));
  return _mm256_sub_ps(one, _mm256_div_ps(_mm256_set1_ps(2.f), _mm256_add_ps(e, one)));
}

__attribute__((target("avx2,fma"))) inline __m256 sigmoid256(__m256 x) {
  const __m256 one = _mm256_set1_ps(1.f);
  return _mm256_div_ps(one, _mm256_add_ps(one, exp256(_mm256_sub_ps(_mm256_setzero_ps(), x))));
}

__attribute__((target("avx2,fma"))) inline float hsum(__m256 v) {
  const __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
  __m128 s = _mm_add_ps(lo, hi);
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

// The sum of v's 16 lanes (halves by zero-masked extracts: GCC 12's _mm512_reduce_add_ps
// warns of an uninitialised operand of its own).
__attribute__((target("avx512f,avx2,fma"))) inline float hsum512(__m512 v) {
  const __m512d v2 = _mm512_castps_pd(v);
  return hsum(_mm256_add_ps(_mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xf, v2, 0)),
                            _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xf, v2, 1))));
}

// sum_h v[h] tanh(a[h] + b[h])
// `acc` starts the sum (the vector loop's partial sum, for its tail).
template <typename T>
inline T tanh_dot_scalar(const T* a, const T* b, const T* v, int64_t n, T acc = 0) {
  for (int64_t i = 0; i < n; ++i) acc += v[i] * std::tanh(a[i] + b[i]);
  return acc;
}

__attribute__((target("avx2,fma"))) inline float tanh_dot_avx2(const float* a, const float* b,
                                                               const float* v, int64_t n) {
  __m256 acc = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    acc = _mm256_fmadd_ps(_mm256_loadu_ps(v + i),
                          tanh256(_mm256_add_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i))),
                          acc);
  return tanh_dot_scalar(a + i, b + i, v + i, n - i, hsum(acc));
}

template <typename T>
inline T tanh_dot(const T* a, const T* b, const T* v, int64_t n) {
  if constexpr (std::is_same_v<T, float>)
    if (use_avx2()) return tanh_dot_avx2(a, b, v, n);
  return tanh_dot_scalar(a, b, v, n);
}

// With t = tanh(a + b): da += g v (1 - t^2), db += the same, dv += g t.
template <typename T>
inline void tanh_backward_scalar(const T* a, const T* b, const T* v, T g, T* da, T* db, T* dv,
                                 int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const T t = std::tanh(a[i] + b[i]), d = g * v[i] * (1 - t * t);
    da[i] += d;
    db[i] += d;
    dv[i] += g * t;
  }
}

__attribute__((target("avx2,fma"))) inline void tanh_backward_avx2(const float* a, const float* b,
                                                                   const float* v, float g,
                                                                   float* da, float* db, float* dv,
                                                                   int64_t n) {
  const __m256 vg = _mm256_set1_ps(g), one = _mm256_set1_ps(1.f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 t = tanh256(_mm256_add_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
    const __m256 d =
        _mm256_mul_ps(_mm256_mul_ps(vg, _mm256_loadu_ps(v + i)), _mm256_fnmadd_ps(t, t, one));
    _mm256_storeu_ps(da + i, _mm256_add_ps(_mm256_loadu_ps(da + i), d));
    _mm256_storeu_ps(db + i, _mm256_add_ps(_mm256_loadu_ps(db + i), d));
    _mm256_storeu_ps(dv + i, _mm256_fmadd_ps(vg, t, _mm256_loadu_ps(dv + i)));
  }
  tanh_backward_scalar(a + i, b + i, v + i, g, da + i, db + i, dv + i, n - i);
}

template <typename T>
inline void tanh_backward(const T* a, const T* b, const T* v, T g, T* da, T* db, T* dv, int64_t n) {
  if constexpr (std::is_same_v<T, float>)
    if (use_avx2()) return tanh_backward_avx2(a, b, v, g, da, db, dv, n);
  tanh_backward_scalar(a, b, v, g, da, db, dv, n);
}

// max_i x[i] for n >= 1.
template <typename T>
inline T max_scalar(const T* x, int64_t n) {
  T best = x[0];
  for (int64_t i = 1; i < n; ++i) best = std::max(best, x[i]);
  return best;
}

// Four running maxima over 32 floats at a time (one would wait on each max's latency); a maximum
// does not depend on the order.
__attribute__((target("avx2,fma"))) inline float max_avx2(const float* x, int64_t n) {
  int64_t i = 0;
  float best = x[0];
  if (n >= 8) {
    __m256 m = _mm256_loadu_ps(x);
    i = 8;
    if (n >= 32) {
      __m256 m1 = _mm256_loadu_ps(x + 8), m2 = _mm256_loadu_ps(x + 16),
             m3 = _mm256_loadu_ps(x + 24);
      for (i = 32; i + 32 <= n; i += 32) {
        m = _mm256_max_ps(m, _mm256_loadu_ps(x + i));
        m1 = _mm256_max_ps(m1, _mm256_loadu_ps(x + i + 8));
        m2 = _mm256_max_ps(m2, _mm256_loadu_ps(x + i + 16));
        m3 = _mm256_max_ps(m3, _mm256_loadu_ps(x + i + 24));
      }
      m = _mm256_max_ps(_mm256_max_ps(m, m1), _mm256_max_ps(m2, m3));
    }
    for (; i + 8 <= n; i += 8) m = _mm256_max_ps(m, _mm256_loadu_ps(x + i));
    const __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    const __m128 q = _mm_max_ps(h, _mm_movehl_ps(h, h));
    best = _mm_cvtss_f32(_mm_max_ss(q, _mm_shuffle_ps(q, q, 1)));
  }
  return i < n ? std::max(best, max_scalar(x + i, n - i)) : best;
}

template <typename T>
inline T max_of(const T* x, int64_t n) {
  if constexpr (std::is_same_v<T, float>)
    if (use_avx2()) return max_avx2(x, n);
  return max_scalar(x, n);
}

// sum_i x[i], four accumulators wide (a single running sum waits on each add's latency).
template <typename T>
inline T sum_scalar(const T* x, int64_t n, T sum = 0) {
  for (int64_t i = 0; i < n; ++i) sum += x[i];
  return sum;
}

__attribute__((target("avx2,fma"))) inline float sum_avx2(const float* x, int64_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    a0 = _mm256_add_ps(a0, _mm256_loadu_ps(x + i));
    a1 = _mm256_add_ps(a1, _mm256_loadu_ps(x + i + 8));
    a2 = _mm256_add_ps(a2, _mm256_loadu_ps(x + i + 16));
    a3 = _mm256_add_ps(a3, _mm256_loadu_ps(x + i + 24));
  }
  for (; i + 8 <= n; i += 8) a0 = _mm256_add_ps(a0, _mm256_loadu_ps(x + i));
  return sum_scalar(x + i, n - i,
                    hsum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3))));
}

template <typename T>
inline T sum_of(const T* x, int64_t n) {
  if constexpr (std::is_same_v<T, float>)
    if (use_avx2()) return sum_avx2(x, n);
  return sum_scalar(x, n);
}

// The first i in [from, n) with x[i] > threshold, or n.
inline int64_t next_above_scalar(const float* x, int64_t from, int64_t n, float threshold) {
  for (int64_t i = from; i < n; ++i)
    if (x[i] > threshold) return i;
  return n;
}

__attribute__((target("avx2,fma"))) inline int64_t next_above_avx2(const float* x, int64_t from,
                                                                   int64_t n, float threshold) {
  const __m256 t = _mm256_set1_ps(threshold);
  int64_t i = from;
  for (; i + 8 <= n; i += 8) {
    const int mask = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + i), t, _CMP_GT_OQ));
    if (mask) return i + __builtin_ctz(static_cast<unsigned>(mask));
  }
  return next_above_scalar(x, i, n, threshold);
}

inline int64_t next_above(const float* x, int64_t from, int64_t n, float threshold) {
  return use_avx2() ? next_above_avx2(x, from, n, threshold)
                    : next_above_scalar(x, from, n, threshold);
}

// x[i] = tanh(x[i]) for i < n.
template <typename T>
inline void tanh_inplace_scalar(T* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = std::tanh(x[i]);
}

__attribute__((target("avx2,fma"))) inline void tanh_inplace_avx2(float* x, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, tanh256(_mm256_loadu_ps(x + i)));
  tanh_inplace_scalar(x + i, n - i);
}

template <typename T>
inline void tanh_inplace(T* x, int64_t n) {
  if constexpr (std::is_same_v<T, float>)
    if (use_avx2()) return tanh_inplace_avx2(x, n);
  tanh_inplace_scalar(x, n);
}

// The base of an exponential: e, or 2 (exp2_256's).
enum class Base { E, Two };

// p[j] = exp(s[j] - m) for j < n (exactly 0 for s[j] = -inf); returns the sum. A null p only
// sums (exp_sum): the same bits, without a row of stores the caller would not read. With
// Base::Two, 2^(s[j] - m) (exp2_shift).
template <typename T, Base kBase = Base::E>
inline T exp_shift_scalar(const T* s, T* p, int n, T m, T sum = 0) {
  for (int j = 0; j < n; ++j) {
    T e = 0;
    if constexpr (kBase == Base::Two)  // below 2^-126 exactly 0, as exp2_256 gives
      e = s[j] - m < T(exp2_poly::kLo) ? T(0) : std::exp2(s[j] - m);
    else
      e = s[j] == -std::numeric_limits<T>::infinity() ? T(0) : std::exp(s[j] - m);
    if (p) p[j] = e;
    sum += e;
  }
  return sum;
}

// Two running sums, for the 8-float groups at even and odd multiples of 8: one sum would wait on
// each add's latency, longer than an exponential takes.
template <Base kBase>
__attribute__((target("avx2,fma"))) inline __m256 exp_in(__m256 x) {
  return kBase == Base::Two ? exp2_256(x) : exp256(x);
}
template <Base kBase>
__attribute__((target("avx512f"))) inline __m512 exp_in(__m512 x) {
  return kBase == Base::Two ? exp2_512(x) : exp512(x);
}

template <Base kBase = Base::E>
__attribute__((target("avx2,fma"))) inline float exp_shift_avx2(const float* s, float* p, int n,
                                                                float m) {
  const __m256 vm = _mm256_set1_ps(m);
  __m256 even = _mm256_setzero_ps(), odd = even;
  int j = 0;
  for (; j + 16 <= n; j += 16) {
    const __m256 e0 = exp_in<kBase>(_mm256_sub_ps(_mm256_loadu_ps(s + j), vm));
    const __m256 e1 = exp_in<kBase>(_mm256_sub_ps(_mm256_loadu_ps(s + j + 8), vm));
    if (p) {
      _mm256_storeu_ps(p + j, e0);
      _mm256_storeu_ps(p + j + 8, e1);
    }
    even = _mm256_add_ps(even, e0);
    odd = _mm256_add_ps(odd, e1);
  }
  if (j + 8 <= n) {
    const __m256 e = exp_in<kBase>(_mm256_sub_ps(_mm256_loadu_ps(s + j), vm));
    if (p) _mm256_storeu_ps(p + j, e);
    even = _mm256_add_ps(even, e);
    j += 8;
  }
  return exp_shift_scalar<float, kBase>(s + j, p ? p + j : p, n - j, m,
                                        hsum(_mm256_add_ps(even, odd)));
}

// p[j] = a exp(s[j] - m) + b for j < n, in one pass.
template <typename T>
inline void exp_affine_scalar(const T* s, T* p, int64_t n, T m, T a, T b) {
  for (int64_t j = 0; j < n; ++j) p[j] = a * std::exp(s[j] - m) + b;
}

__attribute__((target("avx2,fma"))) inline void exp_affine_avx2(const float* s, float* p, int64_t n,
                                                                float m, float a, float b) {
  const __m256 vm = _mm256_set1_ps(m), va = _mm256_set1_ps(a), vb = _mm256_set1_ps(b);
  int64_t j = 0;
  for (; j + 8 <= n; j += 8)
    _mm256_storeu_ps(p + j,
                     _mm256_fmadd_ps(va, exp256(_mm256_sub_ps(_mm256_loadu_ps(s + j), vm)), vb));
  exp_affine_scalar(s + j, p + j, n - j, m, a, b);
}

template <typename T>
inline void exp_affine(const T* s, T* p, int64_t n, T m, T a, T b) {
  if constexpr (std::is_same_v<T, float>)
    if (use_avx2()) return exp_affine_avx2(s, p, n, m, a, b);
  exp_affine_scalar(s, p, n, m, a, b);
}

// The same on AVX-512: 16 exponentials per instruction, into one 16-float sum whose low half is
// the AVX2 loop's even sum and whose high half its odd one, so the result has the AVX2 path's bits
// too. In the fused attention kernel's forward pass at T = 512 the exponentials were a fifth of
// the time.
template <Base kBase = Base::E>
__attribute__((target("avx512f,avx2,fma"))) inline float exp_shift_avx512(const float* s, float* p,
                                                                          int n, float m) {
  const __m512 vm = _mm512_set1_ps(m);
  __m512 acc = _mm512_setzero_ps();
  int j = 0;
  for (; j + 16 <= n; j += 16) {
    const __m512 e = exp_in<kBase>(_mm512_sub_ps(_mm512_loadu_ps(s + j), vm));
    if (p) _mm512_storeu_ps(p + j, e);
    acc = _mm512_add_ps(acc, e);
  }
  // The halves by zero-masked extracts: GCC 12's cast and plain extract warn of an uninitialised
  // operand of their own.
  const __m512d acc2 = _mm512_castps_pd(acc);
  __m256 even = _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xf, acc2, 0));
  const __m256 odd = _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xf, acc2, 1));
  if (j + 8 <= n) {
    const __m256 e = exp_in<kBase>(_mm256_sub_ps(_mm256_loadu_ps(s + j), _mm256_set1_ps(m)));
    if (p) _mm256_storeu_ps(p + j, e);
    even = _mm256_add_ps(even, e);
    j += 8;
  }
  return exp_shift_scalar<float, kBase>(s + j, p ? p + j : p, n - j, m,
                                        hsum(_mm256_add_ps(even, odd)));
}

template <typename T, Base kBase = Base::E>
inline T exp_shift(const T* s, T* p, int n, T m) {
  if constexpr (std::is_same_v<T, float>) {
    if (cpu_isa() == Isa::Avx512) return exp_shift_avx512<kBase>(s, p, n, m);
    if (use_avx2()) return exp_shift_avx2<kBase>(s, p, n, m);
  }
  return exp_shift_scalar<T, kBase>(s, p, n, m);
}

// p[j] = 2^(s[j] - m), as exp_shift: for scores in base 2.
template <typename T>
inline T exp2_shift(const T* s, T* p, int n, T m) {
  return exp_shift<T, Base::Two>(s, p, n, m);
}

// sum_j exp(s[j] - m), in exp_shift's order: the same bits, with nothing stored.
template <typename T>
inline T exp_sum(const T* s, int n, T m) {
  return exp_shift(s, static_cast<T*>(nullptr), n, m);
}

// b[i] = a[i] (b[i] - c) for i < n: the softmax's backward, dS = P (dP - D), one row. The vector
// loop does the scalar loop's two roundings, so the bits are the same.
template <typename T>
inline void mul_sub_scalar(const T* a, T* b, T c, int64_t n) {
  for (int64_t i = 0; i < n; ++i) b[i] = a[i] * (b[i] - c);
}

__attribute__((target("avx2,fma"))) inline void mul_sub_avx2(const float* a, float* b, float c,
                                                             int64_t n) {
  const __m256 vc = _mm256_set1_ps(c);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(
        b + i, _mm256_mul_ps(_mm256_loadu_ps(a + i), _mm256_sub_ps(_mm256_loadu_ps(b + i), vc)));
  mul_sub_scalar(a + i, b + i, c, n - i);
}

// 16 at a time, the tail under a mask (masked loads do not fault past n): 1.1 % of the fused
// attention's forward + backward samples at T = 512 in 8.
__attribute__((target("avx512f,avx2,fma"))) inline void mul_sub_avx512(const float* a, float* b,
                                                                       float c, int64_t n) {
  const __m512 vc = _mm512_set1_ps(c);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 lanes = n - i >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (n - i)) - 1);
    const __m512 p = _mm512_maskz_loadu_ps(lanes, a + i), dp = _mm512_maskz_loadu_ps(lanes, b + i);
    _mm512_mask_storeu_ps(b + i, lanes, _mm512_mul_ps(p, _mm512_sub_ps(dp, vc)));
  }
}

template <typename T>
inline void mul_sub(const T* a, T* b, T c, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    if (cpu_isa() == Isa::Avx512) return mul_sub_avx512(a, b, c, n);
    if (use_avx2()) return mul_sub_avx2(a, b, c, n);
  }
  mul_sub_scalar(a, b, c, n);
}

// out[j] = sum_i x[i ld + j] for j < n, each column summed over the rows in ascending order from
// zero: a bias gradient. Blocks of columns stay in registers over all the rows, so each element
// costs one load and one add; row by row (axpy onto out) it had cost two loads, an add and a
// store, and the bias gradients were 2.3 % of a Transformer training step's samples (0.9 % now).
// The same sums in the same order, so the same bits, on every ISA. AVX-512 machines run this
// AVX2 loop too: a zmm copy of it was 15-30 % faster alone (500 x 1024: 35.4 against 42.5 us,
// one Zen 5 core), about 0.2 % of a training step, not worth a second body of the same loop.
template <typename T>
inline void column_sums_scalar(const T* x, int64_t rows, int64_t ld, T* out, int64_t n) {
  std::fill(out, out + n, T(0));
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < n; ++j) out[j] += x[i * ld + j];
}

// V vectors of columns from column j: 8 V independent sums, enough to cover the add's latency.
template <int V>
__attribute__((target("avx2,fma"))) inline void column_block_avx2(const float* x, int64_t rows,
                                                                  int64_t ld, float* out) {
  __m256 acc[V];
#pragma GCC unroll 8
  for (int v = 0; v < V; ++v) acc[v] = _mm256_setzero_ps();
  for (int64_t i = 0; i < rows; ++i)
#pragma GCC unroll 8
    for (int v = 0; v < V; ++v) acc[v] = _mm256_add_ps(acc[v], _mm256_loadu_ps(x + i * ld + 8 * v));
#pragma GCC unroll 8
  for (int v = 0; v < V; ++v) _mm256_storeu_ps(out + 8 * v, acc[v]);
}

__attribute__((target("avx2,fma"))) inline void column_sums_avx2(const float* x, int64_t rows,
                                                                 int64_t ld, float* out,
                                                                 int64_t n) {
  int64_t j = 0;
  for (; j + 64 <= n; j += 64) column_block_avx2<8>(x + j, rows, ld, out + j);
  for (; j + 8 <= n; j += 8) column_block_avx2<1>(x + j, rows, ld, out + j);
  column_sums_scalar(x + j, rows, ld, out + j, n - j);
}

template <typename T>
inline void column_sums(const T* x, int64_t rows, int64_t ld, T* out, int64_t n) {
  if constexpr (std::is_same_v<T, float>)
    if (use_avx2()) return column_sums_avx2(x, rows, ld, out, n);
  column_sums_scalar(x, rows, ld, out, n);
}

// y[i] += a x[i] for i < n.
template <typename T>
inline void axpy_scalar(T a, const T* x, T* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

__attribute__((target("avx2,fma"))) inline void axpy_avx2(float a, const float* x, float* y,
                                                          int64_t n) {
  const __m256 va = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  axpy_scalar(a, x + i, y + i, n - i);
}

template <typename T>
inline void axpy(T a, const T* x, T* y, int64_t n) {
  if constexpr (std::is_same_v<T, float>)
    if (use_avx2()) return axpy_avx2(a, x, y, n);
  axpy_scalar(a, x, y, n);
}

// x[i] = max(x[i], 0) as std::max(x[i], 0.f) gives it: -0 and NaN stay as they are.
template <typename T>
inline void relu_inplace_scalar(T* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = std::max(x[i], T(0));
}

__attribute__((target("avx2,fma"))) inline void relu_inplace_avx2(float* x, int64_t n) {
  const __m256 zero = _mm256_setzero_ps();
  int64_t i = 0;
  // max_ps(a, b) is a > b ? a : b: zero first keeps x where x is not below it, as std::max.
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_max_ps(zero, _mm256_loadu_ps(x + i)));
  relu_inplace_scalar(x + i, n - i);
}

template <typename T>
inline void relu_inplace(T* x, int64_t n) {
  if constexpr (std::is_same_v<T, float>)
    if (use_avx2()) return relu_inplace_avx2(x, n);
  relu_inplace_scalar(x, n);
}

// sum_i a[i] b[i] for i < n.
template <typename T>
inline T dot_scalar(const T* a, const T* b, int64_t n, T sum = 0) {
  for (int64_t i = 0; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

__attribute__((target("avx2,fma"))) inline float dot_avx2(const float* a, const float* b,
                                                          int64_t n) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
  }
  return dot_scalar(a + i, b + i, n - i, hsum(_mm256_add_ps(acc0, acc1)));
}

template <typename T>
inline T dot(const T* a, const T* b, int64_t n) {
  if constexpr (std::is_same_v<T, float>)
    if (use_avx2()) return dot_avx2(a, b, n);
  return dot_scalar(a, b, n);
}

// dy[i] += a g[i] for i < n, and returns sum_i g[i] x[i]: both halves of the backward pass of
// one weighted row y = a x, in one pass over g.
template <typename T>
inline T dot_axpy_scalar(const T* g, const T* x, T a, T* dy, int64_t n, T sum = 0) {
  for (int64_t i = 0; i < n; ++i) {
    sum += g[i] * x[i];
    dy[i] += a * g[i];
  }
  return sum;
}

__attribute__((target("avx2,fma"))) inline float dot_axpy_avx2(const float* g, const float* x,
                                                               float a, float* dy, int64_t n) {
  const __m256 va = _mm256_set1_ps(a);
  __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256 g0 = _mm256_loadu_ps(g + i), g1 = _mm256_loadu_ps(g + i + 8);
    acc0 = _mm256_fmadd_ps(g0, _mm256_loadu_ps(x + i), acc0);
    acc1 = _mm256_fmadd_ps(g1, _mm256_loadu_ps(x + i + 8), acc1);
    _mm256_storeu_ps(dy + i, _mm256_fmadd_ps(va, g0, _mm256_loadu_ps(dy + i)));
    _mm256_storeu_ps(dy + i + 8, _mm256_fmadd_ps(va, g1, _mm256_loadu_ps(dy + i + 8)));
  }
  return dot_axpy_scalar(g + i, x + i, a, dy + i, n - i, hsum(_mm256_add_ps(acc0, acc1)));
}

template <typename T>
inline T dot_axpy(const T* g, const T* x, T a, T* dy, int64_t n) {
  if constexpr (std::is_same_v<T, float>)
    if (use_avx2()) return dot_axpy_avx2(g, x, a, dy, n);
  return dot_axpy_scalar(g, x, a, dy, n);
}

}  // namespace attnkit::kernels::simd
