#pragma once

// Private to src/kernels: layer normalisation of rows, the one arithmetic of the training kernel
// (layer_norm.h) and of the Transformer's decoding step (transformer_step.h), so that the step
// normalises as the full pass does.

#include <cmath>
#include <cstdint>
#include <vector>

#include "../cpu/simd.h"

namespace attnkit::kernels::layer_norm_rows {

// Rows [from, to) of x [R, D] normalised into y, with each row's mean and 1 / sqrt(var + eps).
// w, b: null for 1 and 0; mean, rstd: null when not wanted; y may be x. The variance is the mean of
// the centred squares (two passes, as ATen's kernel), each sum on vectors.
template <typename T>
inline void forward(const T* x, const T* w, const T* b, T* y, T* mean, T* rstd, int64_t from,
                    int64_t to, int64_t D, double eps) {
  for (int64_t r = from; r < to; ++r) {
    const T* xr = x + r * D;
    T* yr = y + r * D;
    const T m = simd::sum_of(xr, D) / static_cast<T>(D);
    for (int64_t j = 0; j < D; ++j) yr[j] = xr[j] - m;  // centred, then scaled in place
    const T var = simd::dot<T>(yr, yr, D) / static_cast<T>(D);
    const T s = T(1) / std::sqrt(var + static_cast<T>(eps));
    for (int64_t j = 0; j < D; ++j) yr[j] = yr[j] * s * (w ? w[j] : T(1)) + (b ? b[j] : T(0));
    if (mean) mean[r] = m;
    if (rstd) rstd[r] = s;
  }
}

// dx for rows [from, to), and dy * xhat into `scaled` for the weight's gradient:
// dx = rstd (g - mean(g) - xhat mean(g xhat)) (+ skip), g = dy w, xhat = (x - mean) rstd.
// `skip` (null for none): the gradient x receives past the norm, on the residual stream, added
// to each element as a separate sum would add it.
template <typename T>
inline void backward(const T* x, const T* w, const T* dy, const T* mean, const T* rstd, T* dx,
                     T* scaled, int64_t from, int64_t to, int64_t D, const T* skip = nullptr) {
  std::vector<T> xhat(D), g(D);
  for (int64_t r = from; r < to; ++r) {
    const T *xr = x + r * D, *dr = dy + r * D;
    for (int64_t j = 0; j < D; ++j) {
      xhat[j] = (xr[j] - mean[r]) * rstd[r];
      g[j] = dr[j] * (w ? w[j] : T(1));
      if (scaled) scaled[r * D + j] = dr[j] * xhat[j];
    }
    const T a = simd::sum_of(g.data(), D) / static_cast<T>(D),
            c = simd::dot<T>(g.data(), xhat.data(), D) / static_cast<T>(D);
    T* out = dx + r * D;
    for (int64_t j = 0; j < D; ++j) out[j] = rstd[r] * (g[j] - a - xhat[j] * c);
    if (skip)
      for (int64_t j = 0; j < D; ++j) out[j] += skip[r * D + j];
  }
}

}  // namespace attnkit::kernels::layer_norm_rows
