#include "packed_gemm.h"

#include "../cpu/row_parts.h"

#include <immintrin.h>

#include <c10/util/Exception.h>

#include <algorithm>
#include <type_traits>

namespace attnkit::kernels::packed {
namespace {

// 6 rows x 16 columns: 12 accumulators, 2 panel vectors and a broadcast of the 16 ymm registers.
constexpr int kRows2 = 6;
// 8 rows x 32 columns: 16 accumulators of the 32 zmm registers (12 rows measured no faster).
constexpr int kRows512 = 8;
constexpr int64_t kDepth = 256;
// AVX2 takes op(B)'s columns 256 at a time around the row blocks (see multiply_block).
constexpr int64_t kColumnBlock2 = 256;

// c[R, cols] (+)= a[R, K] b, b one k-major panel [K, 16]. Accumulating starts the sums from c,
// so a product split along k continues each element's one chain of FMAs in ascending k.
// Otherwise they start from `start` (a bias row, the same for every row), or from zero when it
// is null: the sums a copy of the bias into c followed by accumulating would give, without the
// copy. With Prefetch, row k of `next` (laid out as b) is prefetched as row k of b is read
// (PackOptions::streamed); the sums are the same.
template <int R, bool Prefetch>
__attribute__((target("avx2,fma"))) void block_avx2(const float* a, int64_t lda, int64_t ks,
                                                    const float* b, int64_t ldb, int64_t K,
                                                    float* c, int64_t ldc, bool accumulate,
                                                    int64_t cols, const float* start,
                                                    const float* next) {
  __m256 lo[R], hi[R];
  alignas(32) float row[16];
  __m256 start_lo = _mm256_setzero_ps(), start_hi = _mm256_setzero_ps();
  if (!accumulate && start) {
    std::fill(row, row + 16, 0.f);
    std::copy(start, start + cols, row);
    start_lo = _mm256_load_ps(row);
    start_hi = _mm256_load_ps(row + 8);
  }
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i) {
    const float* ci = c + i * ldc;
    if (!accumulate) {
      lo[i] = start_lo;
      hi[i] = start_hi;
    } else if (cols == 16) {
      lo[i] = _mm256_loadu_ps(ci);
      hi[i] = _mm256_loadu_ps(ci + 8);
    } else {
      std::fill(row, row + 16, 0.f);
      std::copy(ci, ci + cols, row);
      lo[i] = _mm256_load_ps(row);
      hi[i] = _mm256_load_ps(row + 8);
    }
  }
  for (int64_t k = 0; k < K; ++k) {
    if constexpr (Prefetch)
      _mm_prefetch(reinterpret_cast<const char*>(next + k * ldb), _MM_HINT_T0);
    const __m256 b0 = _mm256_loadu_ps(b + k * ldb), b1 = _mm256_loadu_ps(b + k * ldb + 8);
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
      const __m256 x = _mm256_broadcast_ss(a + i * lda + k * ks);
      lo[i] = _mm256_fmadd_ps(x, b0, lo[i]);
      hi[i] = _mm256_fmadd_ps(x, b1, hi[i]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i) {
    float* ci = c + i * ldc;
    if (cols == 16) {
      _mm256_storeu_ps(ci, lo[i]);
      _mm256_storeu_ps(ci + 8, hi[i]);
      continue;
    }
    _mm256_store_ps(row, lo[i]);  // the right edge: only `cols` columns exist in c
    _mm256_store_ps(row + 8, hi[i]);
    std::copy(row, row + cols, ci);
  }
}

// The same with zmm registers on panels of 32 (a panel row is two cache lines).
template <int R, bool Prefetch>
__attribute__((target("avx512f"))) void block_avx512(const float* a, int64_t lda, int64_t ks,
                                                     const float* b, int64_t ldb, int64_t K,
                                                     float* c, int64_t ldc, bool accumulate,
                                                     int64_t cols, const float* start,
                                                     const float* next) {
  const __mmask16 mlo = static_cast<__mmask16>(cols >= 16 ? 0xffff : (1u << cols) - 1),
                  mhi = static_cast<__mmask16>(cols >= 32  ? 0xffff
                                               : cols > 16 ? (1u << (cols - 16)) - 1
                                                           : 0);
  __m512 lo[R], hi[R];
  const __m512 start_lo = start ? _mm512_maskz_loadu_ps(mlo, start) : _mm512_setzero_ps(),
               start_hi = start ? _mm512_maskz_loadu_ps(mhi, start + 16) : _mm512_setzero_ps();
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i) {
    lo[i] = accumulate ? _mm512_maskz_loadu_ps(mlo, c + i * ldc) : start_lo;
    hi[i] = accumulate ? _mm512_maskz_loadu_ps(mhi, c + i * ldc + 16) : start_hi;
  }
  for (int64_t k = 0; k < K; ++k) {
    if constexpr (Prefetch) {
      _mm_prefetch(reinterpret_cast<const char*>(next + k * ldb), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(next + k * ldb + 16), _MM_HINT_T0);
    }
    const __m512 b0 = _mm512_loadu_ps(b + k * ldb), b1 = _mm512_loadu_ps(b + k * ldb + 16);
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
      const __m512 x = _mm512_set1_ps(a[i * lda + k * ks]);
      lo[i] = _mm512_fmadd_ps(x, b0, lo[i]);
      hi[i] = _mm512_fmadd_ps(x, b1, hi[i]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i) {
    float* ci = c + i * ldc;
    _mm512_mask_storeu_ps(ci, mlo, lo[i]);
    _mm512_mask_storeu_ps(ci + 16, mhi, hi[i]);
  }
}

// Products of 1 to kWideRows rows take several whole panels at once. One panel gives a block
// R x 2 chains of FMAs, and the FMA units need about 8 in flight (4 cycles of latency, 2 units):
// a one-row product on one panel ran at a quarter of the rate, which is why such products went
// to BLAS's GEMV, and with it to OpenBLAS's detection of the CPU. P panels side by side give
// R x 2P chains; each element is still one chain of FMAs in ascending k, as in the blocks above,
// so the results are the same bit for bit. The panels are `stride` floats apart.
constexpr int kWideRows = 3;

template <int R, int P>
__attribute__((target("avx2,fma"))) void wide_avx2(const float* a, int64_t lda, int64_t ks,
                                                   const float* b, int64_t stride, int64_t ldb,
                                                   int64_t K, float* c, int64_t ldc,
                                                   bool accumulate, const float* start) {
  __m256 acc[R][2 * P];
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 8
    for (int q = 0; q < 2 * P; ++q)
      acc[i][q] = accumulate ? _mm256_loadu_ps(c + i * ldc + q * 8)
                  : start    ? _mm256_loadu_ps(start + q * 8)
                             : _mm256_setzero_ps();
  for (int64_t k = 0; k < K; ++k) {
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
      const __m256 x = _mm256_broadcast_ss(a + i * lda + k * ks);
#pragma GCC unroll 8
      for (int q = 0; q < 2 * P; ++q)
        acc[i][q] = _mm256_fmadd_ps(
            x, _mm256_loadu_ps(b + (q / 2) * stride + k * ldb + (q % 2) * 8), acc[i][q]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 8
    for (int q = 0; q < 2 * P; ++q) _mm256_storeu_ps(c + i * ldc + q * 8, acc[i][q]);
}

template <int R, int P>
__attribute__((target("avx512f"))) void wide_avx512(const float* a, int64_t lda, int64_t ks,
                                                    const float* b, int64_t stride, int64_t ldb,
                                                    int64_t K, float* c, int64_t ldc,
                                                    bool accumulate, const float* start) {
  __m512 acc[R][2 * P];
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 8
    for (int q = 0; q < 2 * P; ++q)
      acc[i][q] = accumulate ? _mm512_loadu_ps(c + i * ldc + q * 16)
                  : start    ? _mm512_loadu_ps(start + q * 16)
                             : _mm512_setzero_ps();
  for (int64_t k = 0; k < K; ++k) {
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
      const __m512 x = _mm512_set1_ps(a[i * lda + k * ks]);
#pragma GCC unroll 8
      for (int q = 0; q < 2 * P; ++q)
        acc[i][q] = _mm512_fmadd_ps(
            x, _mm512_loadu_ps(b + (q / 2) * stride + k * ldb + (q % 2) * 16), acc[i][q]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 8
    for (int q = 0; q < 2 * P; ++q) _mm512_storeu_ps(c + i * ldc + q * 16, acc[i][q]);
}

using WideFn = void (*)(const float*, int64_t, int64_t, const float*, int64_t, int64_t, int64_t,
                        float*, int64_t, bool, const float*);
struct Wide {
  WideFn fn;
  int64_t panels;  // P
};
// By rows: at least 8 chains, within the vector registers (16 ymm, 32 zmm).
constexpr Wide kWideAvx2[kWideRows + 1] = {
    {nullptr, 0}, {wide_avx2<1, 4>, 4}, {wide_avx2<2, 2>, 2}, {wide_avx2<3, 2>, 2}};
constexpr Wide kWideAvx512[kWideRows + 1] = {
    {nullptr, 0}, {wide_avx512<1, 4>, 4}, {wide_avx512<2, 4>, 4}, {wide_avx512<3, 2>, 2}};

using BlockFn = void (*)(const float*, int64_t, int64_t, const float*, int64_t, int64_t, float*,
                         int64_t, bool, int64_t, const float*, const float*);
template <bool Prefetch>
constexpr BlockFn kAvx2[kRows2 + 1] = {nullptr,
                                       block_avx2<1, Prefetch>,
                                       block_avx2<2, Prefetch>,
                                       block_avx2<3, Prefetch>,
                                       block_avx2<4, Prefetch>,
                                       block_avx2<5, Prefetch>,
                                       block_avx2<kRows2, Prefetch>};
template <bool Prefetch>
constexpr BlockFn kAvx512[kRows512 + 1] = {nullptr,
                                           block_avx512<1, Prefetch>,
                                           block_avx512<2, Prefetch>,
                                           block_avx512<3, Prefetch>,
                                           block_avx512<4, Prefetch>,
                                           block_avx512<5, Prefetch>,
                                           block_avx512<6, Prefetch>,
                                           block_avx512<7, Prefetch>,
                                           block_avx512<kRows512, Prefetch>};

// dst[r * ldd + c] = scale * src[c * lds + r] for r, c < 8: an 8 x 8 block of W transposed into
// a panel (unpack, shuffle and lane permutes; the scale is the same float multiply as the scalar
// loop's, so the panels hold the same bits).
__attribute__((target("avx"))) void transpose8x8(const float* src, int64_t lds, float* dst,
                                                 int64_t ldd, float scale) {
  __m256 r[8], t[8];
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(src + i * lds);
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    r[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
    r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xEE);
    r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
    r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
  }
  const __m256 s = _mm256_set1_ps(scale);
  for (int i = 0; i < 4; ++i) {
    _mm256_storeu_ps(dst + i * ldd, _mm256_mul_ps(s, _mm256_permute2f128_ps(r[i], r[i + 4], 0x20)));
    _mm256_storeu_ps(dst + (i + 4) * ldd,
                     _mm256_mul_ps(s, _mm256_permute2f128_ps(r[i], r[i + 4], 0x31)));
  }
}

// The portable path and double precision: the same sums in the same order, rounded after each
// multiply where the vector blocks fuse it with the add.
template <typename T>
void multiply_scalar(const T* x, int64_t m, int64_t ldx, int64_t ks, const T* data,
                     int64_t panel_stride, int64_t ldb, int64_t K, int64_t N, int64_t width, T* y,
                     int64_t ldy, bool accumulate, const T* start) {
  std::vector<T> sum(width);
  for (int64_t p = 0; p * width < N; ++p) {
    const T* b = data + p * panel_stride;
    const int64_t cols = std::min(width, N - p * width);
    for (int64_t i = 0; i < m; ++i) {
      T* yi = y + i * ldy + p * width;
      std::fill(sum.begin(), sum.end(), T(0));
      if (accumulate)
        std::copy(yi, yi + cols, sum.begin());
      else if (start)
        std::copy(start + p * width, start + p * width + cols, sum.begin());
      for (int64_t k = 0; k < K; ++k) {
        const T xk = x[i * ldx + k * ks];
        for (int64_t j = 0; j < width; ++j) sum[j] += xk * b[k * ldb + j];
      }
      std::copy(sum.begin(), sum.begin() + cols, yi);
    }
  }
}

}  // namespace

template <typename T>
Panels<T>::Panels(int64_t k, int64_t n, Isa isa)
    : k_(k),
      n_(n),
      width_(isa == Isa::Avx512 ? 32 : 16),
      isa_(std::is_same_v<T, float> ? isa : Isa::Scalar),
      data_(static_cast<T*>(
          ::operator new[](sizeof(T) * static_cast<size_t>((n + width_ - 1) / width_ * width_ * k),
                           std::align_val_t(64)))),
      base_(data_.get()),
      ldb_(width_),
      panel_stride_(k * width_) {
  if (n % width_ == 0) return;
  T* last = data_.get() + (n / width_) * k * width_;  // its columns past n stay zero
  for (int64_t kk = 0; kk < k; ++kk)
    std::fill(last + kk * width_ + n % width_, last + (kk + 1) * width_, T(0));
}

template <typename T>
template <typename Fill>
Panels<T> Panels<T>::pack(int64_t k, int64_t n, const PackOptions& options, const Fill& fill) {
  Panels out(k, n, options.isa);
  out.streamed_ = options.streamed;
  const int64_t panels = (n + out.width_ - 1) / out.width_;
  const T scale = static_cast<T>(options.scale);
  for_each_row_part(std::min(options.parts, std::max<int64_t>(panels, 1)), [&](RowPart part) {
    for (int64_t p = part.first; p < panels; p += part.stride)
      fill(out.data_.get() + p * k * out.width_, p * out.width_,
           std::min(out.width_, n - p * out.width_), out.width_, scale);
  });
  return out;
}

template <typename T>
Panels<T> Panels<T>::transposed(const T* w, int64_t n, int64_t k, int64_t ldw,
                                const PackOptions& options) {
  // W's row `col` is op(B)'s column. In training every forward product packs its weight anew, and
  // element by element this transpose took 14 % of the output layer's forward pass (perf, two
  // threads): blocks of 8 x 8 go through AVX registers, the same products of the same floats.
  const bool vector = std::is_same_v<T, float> && options.isa != Isa::Scalar;
  return pack(k, n, options, [&](T* panel, int64_t first, int64_t cols, int64_t P, T scale) {
    int64_t c0 = 0, k8 = 0;
    if constexpr (std::is_same_v<T, float>) {
      if (vector) {
        k8 = k / 8 * 8;
        for (; c0 + 8 <= cols; c0 += 8)
          for (int64_t k0 = 0; k0 < k8; k0 += 8)
            transpose8x8(w + (first + c0) * ldw + k0, ldw, panel + k0 * P + c0, P, scale);
      }
    }
    // What the blocks leave: the last k % 8 rows of their columns, then the columns past them.
    for (int64_t c = 0; c < cols; ++c) {
      const T* src = w + (first + c) * ldw;
      for (int64_t kk = c < c0 ? k8 : 0; kk < k; ++kk) panel[kk * P + c] = scale * src[kk];
    }
  });
}

template <typename T>
Panels<T> Panels<T>::plain(const T* b, int64_t k, int64_t n, int64_t ldb,
                           const PackOptions& options) {
  // Row by row, each part a contiguous block of B's rows: every row is read once, from start to
  // end, and written as a row of each panel. Panel by panel (a panel's 32 columns of every row,
  // rows ldb apart) the reads defeated the hardware prefetcher: a weight gradient packs the
  // layer's input, saved by the forward pass and long out of cache, and from main memory that
  // order took 1.1-1.7 ns an element against 0.5-0.8 row by row (768 x 256 and 768 x 1024, two
  // threads). The same floats land in the same places, so no product changes.
  Panels out(k, n, options.isa);
  out.streamed_ = options.streamed;
  const int64_t W = out.width_, panels = (n + W - 1) / W;
  const T scale = static_cast<T>(options.scale);
  T* data = out.data_.get();
  const int64_t parts = std::max<int64_t>(1, std::min(options.parts, k / 8));
  for_each_row_part(parts, [&](RowPart part) {
    const int64_t from = k * part.first / part.stride, to = k * (part.first + 1) / part.stride;
    for (int64_t kk = from; kk < to; ++kk)
      for (int64_t p = 0; p < panels; ++p) {
        const T* src = b + kk * ldb + p * W;
        T* dst = data + (p * k + kk) * W;
        const int64_t cols = std::min(W, n - p * W);
        for (int64_t c = 0; c < cols; ++c) dst[c] = scale * src[c];
      }
  });
  return out;
}

template <typename T>
Panels<T> Panels<T>::in_place(const T* b, int64_t k, int64_t n, int64_t ldb,
                              const PackOptions& options) {
  const int64_t width = options.isa == Isa::Avx512 && std::is_same_v<T, float> ? 32 : 16;
  if (n % width != 0 || options.scale != 1 || ldb * sizeof(T) % 4096 == 0)
    return plain(b, k, n, ldb, options);
  Panels out;
  out.k_ = k;
  out.n_ = n;
  out.width_ = width;
  out.isa_ = std::is_same_v<T, float> ? options.isa : Isa::Scalar;
  out.base_ = b;
  out.ldb_ = ldb;
  out.panel_stride_ = width;  // panel p: columns p width .. of B's rows
  out.streamed_ = options.streamed;
  return out;
}

template <typename T>
void Panels<T>::multiply(const T* x, int64_t m, int64_t ldx, T* y, int64_t ldy, bool accumulate,
                         int64_t kstride, const T* bias) const {
  multiply_block(x, m, ldx, y, ldy, accumulate, kstride, 0, k_, 0, n_, bias);
}

template <typename T>
void Panels<T>::multiply_block(const T* x, int64_t m, int64_t ldx, T* y, int64_t ldy,
                               bool accumulate, int64_t kstride, int64_t k_begin, int64_t k_end,
                               int64_t col_begin, int64_t col_end, const T* bias) const {
  TORCH_CHECK(
      col_begin % width_ == 0 && 0 <= k_begin && k_begin <= k_end && k_end <= k_ && col_end <= n_,
      "Panels::multiply_block: columns must start on a panel, and rows and columns lie "
      "inside the packed matrix");
  const int64_t K = k_end - k_begin, N = col_end - col_begin;
  if (m <= 0 || N <= 0) return;
  if (accumulate) bias = nullptr;
  if (K == 0) {  // an empty sum
    for (int64_t i = 0; i < m && !accumulate; ++i) {
      if (bias)
        std::copy(bias, bias + N, y + i * ldy);
      else
        std::fill(y + i * ldy, y + i * ldy + N, T(0));
    }
    return;
  }
  const T* first = base_ + (col_begin / width_) * panel_stride_ + k_begin * ldb_;
  if constexpr (std::is_same_v<T, float>) {
    if (isa_ != Isa::Scalar) {
      const int rows = isa_ == Isa::Avx512 ? kRows512 : kRows2;
      const BlockFn* blocks = isa_ == Isa::Avx512 ? kAvx512<false> : kAvx2<false>;
      // Streamed panels (PackOptions::streamed): a panel's first row block prefetches the next
      // panel's slice, if the row block has more rows than one block takes.
      const BlockFn* leading = !streamed_            ? blocks
                               : isa_ == Isa::Avx512 ? kAvx512<true>
                                                     : kAvx2<true>;
      int64_t p0 = 0;  // the first panel left to the blocks
      if (m <= kWideRows) {
        const Wide wide = (isa_ == Isa::Avx512 ? kWideAvx512 : kWideAvx2)[m];
        for (; (p0 + wide.panels) * width_ <= N; p0 += wide.panels)
          wide.fn(x, ldx, kstride, first + p0 * panel_stride_, panel_stride_, ldb_, K,
                  y + p0 * width_, ldy, accumulate, bias ? bias + p0 * width_ : nullptr);
      }
      // Sums longer than kDepth are taken kDepth at a time, so that a panel's slice (32 KiB at
      // most) stays in L1 while every row block streams it, and the rows kRowBlock at a time, so
      // that their x block (96 KiB) stays in L2 with the slices: without the row blocks 1024^3 ran
      // at half the rate on one core. On AVX2 the columns are taken 256 at a time too, so that a
      // row block's y stays in a 512 KiB L2 beside its x block (512 x 256 x 2784 on a Zen 3:
      // 49-53 -> 54-59 GFLOP/s, bench `PackedGemm`). Each sum still runs over k in ascending
      // order, so the blocking changes no result.
      const int64_t panels = (N + width_ - 1) / width_;
      const int64_t group = isa_ == Isa::Avx2 ? kColumnBlock2 / width_ : panels;
      for (int64_t g0 = p0; g0 < panels; g0 += group) {
        const int64_t g1 = std::min(panels, g0 + group);
        for (int64_t i0 = 0; i0 < m; i0 += kRowBlock) {
          const int64_t i1 = std::min(m, i0 + kRowBlock);
          for (int64_t k0 = 0; k0 < K; k0 += kDepth) {
            const int64_t depth = std::min(kDepth, K - k0);
            for (int64_t p = g0; p < g1; ++p) {
              const float* b = first + p * panel_stride_ + k0 * ldb_;
              const float* next = p + 1 < g1 && i1 - i0 > rows ? b + panel_stride_ : nullptr;
              const int64_t cols = std::min(width_, N - p * width_);
              for (int64_t i = i0; i < i1; i += rows) {
                const int64_t r = i1 - i < rows ? i1 - i : rows;
                const BlockFn block = (i == i0 && next ? leading : blocks)[r];
                block(x + i * ldx + k0 * kstride, ldx, kstride, b, ldb_, depth,
                      y + i * ldy + p * width_, ldy, accumulate || k0 > 0, cols,
                      bias ? bias + p * width_ : nullptr, next);
              }
            }
          }
        }
      }
      return;
    }
  }
  multiply_scalar(x, m, ldx, kstride, first, panel_stride_, ldb_, K, N, width_, y, ldy, accumulate,
                  bias);
}

// Whole 8-row blocks per share where there are enough; otherwise op(B)'s panels (columns), so
// that a decoding step's one-row product still streams its weight on every thread.
template <typename T>
int64_t Panels<T>::part_count(int64_t m, int64_t parts) const {
  const int64_t blocks = (m + 7) / 8, panels = (n_ + width_ - 1) / width_;
  if (blocks < parts && panels > 1) return std::min(parts, panels);
  return std::max<int64_t>(1, std::min(parts, blocks));
}

template <typename T>
void Panels<T>::multiply_part(const T* x, int64_t m, int64_t ldx, T* y, int64_t ldy,
                              bool accumulate, int64_t kstride, int64_t count, int64_t j,
                              const T* bias) const {
  const int64_t blocks = (m + 7) / 8, panels = (n_ + width_ - 1) / width_;
  if (blocks < count && panels > 1) {
    const int64_t first = panels * j / count, last = panels * (j + 1) / count;
    multiply_block(x, m, ldx, y + first * width_, ldy, accumulate, kstride, 0, k_, first * width_,
                   std::min(n_, last * width_), bias ? bias + first * width_ : nullptr);
    return;
  }
  const int64_t from = std::min(m, blocks * j / count * 8),
                to = std::min(m, blocks * (j + 1) / count * 8);
  multiply(x + from * ldx, to - from, ldx, y + from * ldy, ldy, accumulate, kstride, bias);
}

template <typename T>
void Panels<T>::multiply_parallel(const T* x, int64_t m, int64_t ldx, T* y, int64_t ldy,
                                  bool accumulate, int64_t kstride, int64_t parts,
                                  const T* bias) const {
  const int64_t count = part_count(m, parts);
  for_each_row_part(count, [&](RowPart part) {
    multiply_part(x, m, ldx, y, ldy, accumulate, kstride, count, part.first, bias);
  });
}

template class Panels<float>;
template class Panels<double>;

}  // namespace attnkit::kernels::packed
