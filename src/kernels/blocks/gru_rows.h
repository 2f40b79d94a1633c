#pragma once

// Private to src/kernels: one row of a GRU step and of its backward pass, shared by the GRU
// kernels (gru.cpp) and the attention decoder's recurrence (attention_decoder.cpp).

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "../cpu/simd.h"

namespace attnkit::kernels::gru_rows {

template <typename T>
T sigmoid(T x) {
  return T(1) / (T(1) + std::exp(-x));
}

// One row of a step: gi, gh [3H], h [H] -> out [H]; `save` [4H] receives r, z, n and gh_n for
// the backward pass (nullptr: not needed).
template <typename T>
void gates_row(const T* gi, const T* gh, const T* h, T* out, T* save, int64_t H, int64_t from = 0) {
  for (int64_t j = from; j < H; ++j) {
    const T r = sigmoid(gi[j] + gh[j]), z = sigmoid(gi[H + j] + gh[H + j]), ghn = gh[2 * H + j];
    const T n = std::tanh(gi[2 * H + j] + r * ghn);
    if (save) {
      save[j] = r;
      save[H + j] = z;
      save[2 * H + j] = n;
      save[3 * H + j] = ghn;
    }
    out[j] = n + z * (h[j] - n);
  }
}

__attribute__((target("avx2,fma"))) inline void gates_row_avx2(const float* gi, const float* gh,
                                                               const float* h, float* out,
                                                               float* save, int64_t H) {
  int64_t j = 0;
  for (; j + 8 <= H; j += 8) {
    const __m256 r =
        simd::sigmoid256(_mm256_add_ps(_mm256_loadu_ps(gi + j), _mm256_loadu_ps(gh + j)));
    const __m256 z =
        simd::sigmoid256(_mm256_add_ps(_mm256_loadu_ps(gi + H + j), _mm256_loadu_ps(gh + H + j)));
    const __m256 ghn = _mm256_loadu_ps(gh + 2 * H + j);
    const __m256 n = simd::tanh256(_mm256_fmadd_ps(r, ghn, _mm256_loadu_ps(gi + 2 * H + j)));
    const __m256 hv = _mm256_loadu_ps(h + j);
    if (save) {
      _mm256_storeu_ps(save + j, r);
      _mm256_storeu_ps(save + H + j, z);
      _mm256_storeu_ps(save + 2 * H + j, n);
      _mm256_storeu_ps(save + 3 * H + j, ghn);
    }
    _mm256_storeu_ps(out + j, _mm256_fmadd_ps(z, _mm256_sub_ps(hv, n), n));
  }
  gates_row<float>(gi, gh, h, out, save, H, j);
}

template <typename T>
void gates(const T* gi, const T* gh, const T* h, T* out, T* save, int64_t H) {
  if constexpr (std::is_same_v<T, float>) {
    if (simd::use_avx2()) return gates_row_avx2(gi, gh, h, out, save, H);
  }
  gates_row<T>(gi, gh, h, out, save, H);
}

template <typename T>
void gates_backward_row_scalar(const T* save, const T* h, const T* g, T* dgi, T* dgh, T* dh,
                               int64_t H, int64_t from = 0) {
  for (int64_t j = from; j < H; ++j) {
    const T r = save[j], z = save[H + j], n = save[2 * H + j], ghn = save[3 * H + j];
    const T dn = g[j] * (T(1) - z) * (T(1) - n * n);
    const T dz = g[j] * (h[j] - n) * z * (T(1) - z);
    const T dr = dn * ghn * r * (T(1) - r);
    dgi[j] = dgh[j] = dr;
    dgi[H + j] = dgh[H + j] = dz;
    dgi[2 * H + j] = dn;
    dgh[2 * H + j] = dn * r;
    dh[j] = g[j] * z;
  }
}

__attribute__((target("avx2,fma"))) inline void gates_backward_row_avx2(const float* save,
                                                                        const float* h,
                                                                        const float* g, float* dgi,
                                                                        float* dgh, float* dh,
                                                                        int64_t H) {
  const __m256 one = _mm256_set1_ps(1.f);
  int64_t j = 0;
  for (; j + 8 <= H; j += 8) {
    const __m256 r = _mm256_loadu_ps(save + j), z = _mm256_loadu_ps(save + H + j),
                 n = _mm256_loadu_ps(save + 2 * H + j), ghn = _mm256_loadu_ps(save + 3 * H + j),
                 gj = _mm256_loadu_ps(g + j), hj = _mm256_loadu_ps(h + j);
    const __m256 one_z = _mm256_sub_ps(one, z);
    const __m256 dn = _mm256_mul_ps(_mm256_mul_ps(gj, one_z), _mm256_fnmadd_ps(n, n, one));
    const __m256 dz =
        _mm256_mul_ps(_mm256_mul_ps(gj, _mm256_sub_ps(hj, n)), _mm256_mul_ps(z, one_z));
    const __m256 dr =
        _mm256_mul_ps(_mm256_mul_ps(dn, ghn), _mm256_mul_ps(r, _mm256_sub_ps(one, r)));
    _mm256_storeu_ps(dgi + j, dr);
    _mm256_storeu_ps(dgh + j, dr);
    _mm256_storeu_ps(dgi + H + j, dz);
    _mm256_storeu_ps(dgh + H + j, dz);
    _mm256_storeu_ps(dgi + 2 * H + j, dn);
    _mm256_storeu_ps(dgh + 2 * H + j, _mm256_mul_ps(dn, r));
    _mm256_storeu_ps(dh + j, _mm256_mul_ps(gj, z));  // last: dh may alias g
  }
  gates_backward_row_scalar<float>(save, h, g, dgi, dgh, dh, H, j);
}

// The backward pass of one row. From g = dL/dh' and the saved r, z, n, gh_n and h:
// dgi [3H], dgh [3H] (they differ only in the n block, scaled by r) and dh = g * z, the part of
// dL/dh that does not go through W_hh. dh may alias g.
template <typename T>
void gates_backward_row(const T* save, const T* h, const T* g, T* dgi, T* dgh, T* dh, int64_t H) {
  if constexpr (std::is_same_v<T, float>) {
    if (simd::use_avx2()) return gates_backward_row_avx2(save, h, g, dgi, dgh, dh, H);
  }
  gates_backward_row_scalar<T>(save, h, g, dgi, dgh, dh, H);
}

}  // namespace attnkit::kernels::gru_rows
