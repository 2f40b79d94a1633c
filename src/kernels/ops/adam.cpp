#include "attnkit/kernels/ops/adam.h"

#include <cmath>

#include "../cpu/row_parts.h"
#include "../cpu/simd.h"

namespace attnkit::kernels {
namespace {

// The scalar loop, also the tail of the vector one; the same order of operations as LibTorch's
// kernels, so the two agree to a rounding.
void adam_scalar(float* p, const float* g, float* m, float* v, int64_t from, int64_t n,
                 const AdamUpdate& u, float sqrt_bc2) {
  for (int64_t i = from; i < n; ++i) {
    const float gi = g[i] * u.grad_scale;  // the bits of the gradient scaled in place first
    m[i] = m[i] * u.beta1 + (1 - u.beta1) * gi;
    v[i] = v[i] * u.beta2 + (1 - u.beta2) * gi * gi;
    const float denom = std::sqrt(v[i]) / sqrt_bc2 + u.eps;
    p[i] -= u.step_size * (m[i] / denom);
  }
}

__attribute__((target("avx2,fma"))) void adam_avx2(float* p, const float* g, float* m, float* v,
                                                   int64_t n, const AdamUpdate& u, float sqrt_bc2) {
  const __m256 b1 = _mm256_set1_ps(u.beta1), a1 = _mm256_set1_ps(1 - u.beta1);
  const __m256 b2 = _mm256_set1_ps(u.beta2), a2 = _mm256_set1_ps(1 - u.beta2);
  const __m256 eps = _mm256_set1_ps(u.eps), c2 = _mm256_set1_ps(sqrt_bc2);
  const __m256 step = _mm256_set1_ps(-u.step_size), scale = _mm256_set1_ps(u.grad_scale);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 gv = _mm256_mul_ps(_mm256_loadu_ps(g + i), scale);
    const __m256 mv = _mm256_fmadd_ps(gv, a1, _mm256_mul_ps(_mm256_loadu_ps(m + i), b1));
    const __m256 vv =
        _mm256_fmadd_ps(_mm256_mul_ps(a2, gv), gv, _mm256_mul_ps(_mm256_loadu_ps(v + i), b2));
    const __m256 denom = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(vv), c2), eps);
    _mm256_storeu_ps(m + i, mv);
    _mm256_storeu_ps(v + i, vv);
    _mm256_storeu_ps(p + i,
                     _mm256_fmadd_ps(step, _mm256_div_ps(mv, denom), _mm256_loadu_ps(p + i)));
  }
  adam_scalar(p, g, m, v, i, n, u, sqrt_bc2);
}

}  // namespace

void adam_update(float* p, const float* g, float* m, float* v, int64_t n, const AdamUpdate& u) {
  adam_update({AdamTensor{p, g, m, v, n, u}});
}

// Element by element, so the elements are split between the kernels' threads with the same
// result: in a training step on one thread Adam took 2-3 % of the time.
void adam_update(const std::vector<AdamTensor>& tensors) {
  std::vector<int64_t> sizes;
  for (const auto& t : tensors) sizes.push_back(t.n);
  for_each_piece(sizes, [&](size_t i, int64_t from, int64_t to) {
    const AdamTensor& t = tensors[i];
    const int64_t count = to - from;
    if (simd::use_avx2())
      return adam_avx2(t.p + from, t.g + from, t.m + from, t.v + from, count, t.u,
                       t.u.sqrt_bias_correction2);
    adam_scalar(t.p + from, t.g + from, t.m + from, t.v + from, 0, count, t.u,
                t.u.sqrt_bias_correction2);
  });
}

}  // namespace attnkit::kernels
