#include "attend_row.h"

#include <immintrin.h>

#include <algorithm>
#include <limits>

#include "../cpu/simd.h"
#include "attnkit/kernels/cpu/cpu_isa.h"
#include "softmax_row.h"

namespace attnkit::kernels {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Where position j's key and value lie: rows d apart (Rows), or one pointer per position
// (Gathered: a beam's self-attention cache, whose positions its ancestors wrote).
struct Rows {
  const float *keys, *values;
  int64_t d;
  const float* key(int64_t j) const { return keys + j * d; }
  const float* value(int64_t j) const { return values + j * d; }
};
struct Gathered {
  const float *const *keys, *const *values;
  const float* key(int64_t j) const { return keys[j]; }
  const float* value(int64_t j) const { return values[j]; }
};

template <typename At>
void attend_portable(const float* q, const At& at, int64_t n, int64_t d, const bool* keep,
                     float scale, float* w, float* ctx) {
  for (int64_t j = 0; j < n; ++j)
    w[j] = (!keep || keep[j]) ? simd::dot(q, at.key(j), d) * scale : 0.f;
  std::fill(ctx, ctx + d, 0.f);
  if (!masked_softmax_row(w, keep, w, n)) return;  // nothing to attend to: zeros
  for (int64_t j = 0; j < n; ++j)
    if (w[j] != 0.f) simd::axpy(w[j], at.value(j), ctx, d);
}

// d = 16 V: q, and ctx's sums over the even and the odd keys, in 3 V registers.
template <int V, typename At>
__attribute__((target("avx512f,avx2,fma"))) void attend_avx512(const float* q, const At& at,
                                                               int64_t n, const bool* keep,
                                                               float scale, float* w, float* ctx) {
  constexpr int64_t d = 16 * V;
  __m512 qv[V];
#pragma GCC unroll 8
  for (int v = 0; v < V; ++v) qv[v] = _mm512_loadu_ps(q + 16 * v);
  // Scores, -inf where not kept; each one sum of d products in a fixed order.
  float best = kNegInf;
  for (int64_t j = 0; j < n; ++j) {
    if (keep && !keep[j]) {
      w[j] = kNegInf;
      continue;
    }
    const float* k = at.key(j);
    __m512 acc = _mm512_mul_ps(qv[0], _mm512_loadu_ps(k));
#pragma GCC unroll 8
    for (int v = 1; v < V; ++v) acc = _mm512_fmadd_ps(qv[v], _mm512_loadu_ps(k + 16 * v), acc);
    w[j] = simd::hsum512(acc) * scale;
    best = std::max(best, w[j]);
  }
  __m512 c0[V], c1[V];
#pragma GCC unroll 8
  for (int v = 0; v < V; ++v) c0[v] = c1[v] = _mm512_setzero_ps();
  if (best == kNegInf) {  // nothing to attend to: zeros
    std::fill(w, w + n, 0.f);
    std::fill(ctx, ctx + d, 0.f);
    return;
  }
  // The exponentials 16 at a time (each lane on its own: the same bits wherever a key sits), the
  // sum in ascending j.
  const __m512 vbest = _mm512_set1_ps(best);
  for (int64_t j = 0; j < n; j += 16) {
    const __mmask16 lanes = n - j >= 16 ? 0xffff : static_cast<__mmask16>((1u << (n - j)) - 1);
    const __m512 s = _mm512_mask_loadu_ps(_mm512_set1_ps(kNegInf), lanes, w + j);
    _mm512_mask_storeu_ps(w + j, lanes, simd::exp512(_mm512_sub_ps(s, vbest)));
  }
  float total = 0.f;
  for (int64_t j = 0; j < n; ++j) total += w[j];
  // ctx = sum_j e_j V_j / total: even keys into c0, odd into c1, so two chains of FMAs overlap.
  for (int64_t j = 0; j < n; ++j) {
    if (w[j] == 0.f) continue;  // not kept (or underflowed): V_j is not read
    const __m512 e = _mm512_set1_ps(w[j]);
    const float* val = at.value(j);
    if (j % 2 == 0) {
#pragma GCC unroll 8
      for (int v = 0; v < V; ++v) c0[v] = _mm512_fmadd_ps(e, _mm512_loadu_ps(val + 16 * v), c0[v]);
    } else {
#pragma GCC unroll 8
      for (int v = 0; v < V; ++v) c1[v] = _mm512_fmadd_ps(e, _mm512_loadu_ps(val + 16 * v), c1[v]);
    }
  }
  const float inv = 1.f / total;
  const __m512 vinv = _mm512_set1_ps(inv);
#pragma GCC unroll 8
  for (int v = 0; v < V; ++v)
    _mm512_storeu_ps(ctx + 16 * v, _mm512_mul_ps(_mm512_add_ps(c0[v], c1[v]), vinv));
  for (int64_t j = 0; j < n; ++j) w[j] *= inv;
}

template <typename At>
using AttendFn = void (*)(const float*, const At&, int64_t, const bool*, float, float*, float*);

// By d / 16, for d up to 128 (a 512-wide model's 4 heads; 8 registers each for q, c0 and c1).
template <typename At>
constexpr AttendFn<At> kAvx512[9] = {nullptr,
                                     attend_avx512<1, At>,
                                     attend_avx512<2, At>,
                                     attend_avx512<3, At>,
                                     attend_avx512<4, At>,
                                     attend_avx512<5, At>,
                                     attend_avx512<6, At>,
                                     attend_avx512<7, At>,
                                     attend_avx512<8, At>};

template <typename At>
void attend(const float* q, const At& at, int64_t n, int64_t d, const bool* keep, float scale,
            float* weights, float* ctx) {
  if (cpu_isa() == Isa::Avx512 && d % 16 == 0 && d <= 128)
    return kAvx512<At>[d / 16](q, at, n, keep, scale, weights, ctx);
  attend_portable(q, at, n, d, keep, scale, weights, ctx);
}

}  // namespace

void attend_row(const float* q, const float* keys, const float* values, int64_t n, int64_t d,
                const bool* keep, float scale, float* weights, float* ctx) {
  attend(q, Rows{keys, values, d}, n, d, keep, scale, weights, ctx);
}

void attend_row(const float* q, const float* const* keys, const float* const* values, int64_t n,
                int64_t d, const bool* keep, float scale, float* weights, float* ctx) {
  attend(q, Gathered{keys, values}, n, d, keep, scale, weights, ctx);
}

}  // namespace attnkit::kernels
