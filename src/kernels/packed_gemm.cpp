#include "packed_gemm.h"

#include <immintrin.h>

#include <algorithm>

#include "simd.h"

namespace attnkit::kernels::packed {
namespace {

constexpr int64_t P = Panels<float>::kPanel;
constexpr int kRows = 6;  // 6 rows x 16 columns: 12 accumulators, 2 panel vectors, 1 broadcast

// c[R, cols] (+)= a[R, K] b, b one k-major panel [K, 16]; every sum in ascending k.
template <int R>
__attribute__((target("avx2,fma"))) void block_avx2(const float* a, int64_t lda, const float* b,
                                                    int64_t K, float* c, int64_t ldc,
                                                    bool accumulate, int64_t cols) {
  __m256 lo[R], hi[R];
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i) lo[i] = hi[i] = _mm256_setzero_ps();
  for (int64_t k = 0; k < K; ++k) {
    const __m256 b0 = _mm256_loadu_ps(b + k * P), b1 = _mm256_loadu_ps(b + k * P + 8);
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
      const __m256 x = _mm256_broadcast_ss(a + i * lda + k);
      lo[i] = _mm256_fmadd_ps(x, b0, lo[i]);
      hi[i] = _mm256_fmadd_ps(x, b1, hi[i]);
    }
  }
  if (cols == P) {
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
      float* ci = c + i * ldc;
      if (accumulate) {
        lo[i] = _mm256_add_ps(lo[i], _mm256_loadu_ps(ci));
        hi[i] = _mm256_add_ps(hi[i], _mm256_loadu_ps(ci + 8));
      }
      _mm256_storeu_ps(ci, lo[i]);
      _mm256_storeu_ps(ci + 8, hi[i]);
    }
    return;
  }
  alignas(32) float row[P];
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i) {  // the right edge: only `cols` columns exist in c
    _mm256_store_ps(row, lo[i]);
    _mm256_store_ps(row + 8, hi[i]);
    float* ci = c + i * ldc;
    for (int64_t j = 0; j < cols; ++j) ci[j] = accumulate ? ci[j] + row[j] : row[j];
  }
}

using BlockFn = void (*)(const float*, int64_t, const float*, int64_t, float*, int64_t, bool,
                         int64_t);
constexpr BlockFn kBlocks[kRows + 1] = {nullptr,          block_avx2<1>, block_avx2<2>,
                                        block_avx2<3>,    block_avx2<4>, block_avx2<5>,
                                        block_avx2<kRows>};

// The portable path and double precision: the same sums in the same order, rounded after each
// multiply where the AVX2 path fuses it with the add.
template <typename T>
void multiply_scalar(const T* x, int64_t m, int64_t ldx, const T* data, int64_t K, int64_t N, T* y,
                     int64_t ldy, bool accumulate) {
  for (int64_t p = 0; p * P < N; ++p) {
    const T* b = data + p * K * P;
    const int64_t cols = std::min<int64_t>(P, N - p * P);
    for (int64_t i = 0; i < m; ++i) {
      T sum[P] = {};
      for (int64_t k = 0; k < K; ++k) {
        const T xk = x[i * ldx + k];
        for (int64_t j = 0; j < P; ++j) sum[j] += xk * b[k * P + j];
      }
      T* yi = y + i * ldy + p * P;
      for (int64_t j = 0; j < cols; ++j) yi[j] = accumulate ? yi[j] + sum[j] : sum[j];
    }
  }
}

}  // namespace

template <typename T>
Panels<T>::Panels(int64_t k, int64_t n)
    : k_(k), n_(n), data_(static_cast<size_t>((n + P - 1) / P * P * k), T(0)) {}

template <typename T>
Panels<T> Panels<T>::transposed(const T* w, int64_t n, int64_t k, int64_t ldw) {
  Panels out(k, n);
  for (int64_t col = 0; col < n; ++col) {  // W's row `col` is op(B)'s column: read it in order
    T* dst = out.data_.data() + (col / P) * k * P + col % P;
    const T* src = w + col * ldw;
    for (int64_t kk = 0; kk < k; ++kk) dst[kk * P] = src[kk];
  }
  return out;
}

template <typename T>
Panels<T> Panels<T>::plain(const T* b, int64_t k, int64_t n, int64_t ldb) {
  Panels out(k, n);
  for (int64_t p = 0; p * P < n; ++p) {
    const int64_t cols = std::min<int64_t>(P, n - p * P);
    T* dst = out.data_.data() + p * k * P;
    for (int64_t kk = 0; kk < k; ++kk)
      std::copy(b + kk * ldb + p * P, b + kk * ldb + p * P + cols, dst + kk * P);
  }
  return out;
}

template <typename T>
void Panels<T>::multiply(const T* x, int64_t m, int64_t ldx, T* y, int64_t ldy,
                         bool accumulate) const {
  if (m <= 0 || n_ == 0) return;
  if constexpr (std::is_same_v<T, float>) {
    if (simd::have_avx2()) {
      for (int64_t p = 0; p * P < n_; ++p) {
        const float* b = data_.data() + p * k_ * P;
        const int64_t cols = std::min<int64_t>(P, n_ - p * P);
        for (int64_t i = 0; i < m; i += kRows) {
          const int64_t rows = std::min<int64_t>(kRows, m - i);
          kBlocks[rows](x + i * ldx, ldx, b, k_, y + i * ldy + p * P, ldy, accumulate, cols);
        }
      }
      return;
    }
  }
  multiply_scalar(x, m, ldx, data_.data(), k_, n_, y, ldy, accumulate);
}

template class Panels<float>;
template class Panels<double>;

}  // namespace attnkit::kernels::packed
