#include "int8_gemm.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "../cpu/row_parts.h"
#include "attnkit/core/error.h"

// GCC 12 warns that the unused lanes its AVX-512 intrinsics fill with _mm512_undefined_ps() and
// the like "may be used uninitialized" wherever they inline (GCC bug 105593, fixed in GCC 13).
// The lanes are masked off by design, so the warning is silenced for this file's kernels.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace attnkit::kernels::int8 {
namespace {

constexpr int64_t W = Panels::kWidth, G = Panels::kGroup;
constexpr int64_t kPanelGroupBytes = W * G;  // one group of one panel: 64 bytes

bool cpu_has_vnni() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512bw");
}

// Sums for R rows x P panels (16 columns each) land in a block of int32 [R, P * 16]: the
// callers' epilogue or copy reads them from there.
constexpr int64_t kMaxPanels = 8;
constexpr int64_t kBlockCols = kMaxPanels * W;

// ---- AVX-512 VNNI: xu = q_x + 128 (unsigned) times q_w (signed), 4 bytes per int32 lane --------

// acc[r, p * 16 + j] for R rows x P panels, minus the compensation 128 sum_k q_w. R x P chains of
// vpdpbusd: 16 for blocks of 4 rows (the weight's 4 panel vectors reused by 4 rows from L1), 8
// for one row (a decoding step, which streams the weight: enough chains to cover the latency).
template <int R, int P>
__attribute__((target("avx512f,avx512bw,avx512vnni"))) void vnni_block(
    const uint8_t* xu, int64_t ldx, const int8_t* w, int64_t panel_bytes, int64_t groups,
    const int32_t* compensate, int32_t* acc) {
  __m512i c[R][P];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int p = 0; p < P; ++p) c[r][p] = _mm512_setzero_si512();
  for (int64_t g = 0; g < groups; ++g) {
    __m512i wv[P];
#pragma GCC unroll 8
    for (int p = 0; p < P; ++p)
      wv[p] = _mm512_loadu_si512(w + p * panel_bytes + g * kPanelGroupBytes);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      int32_t four;
      std::memcpy(&four, xu + r * ldx + g * G, sizeof four);
      const __m512i xb = _mm512_set1_epi32(four);
#pragma GCC unroll 8
      for (int p = 0; p < P; ++p) c[r][p] = _mm512_dpbusd_epi32(c[r][p], xb, wv[p]);
    }
  }
#pragma GCC unroll 8
  for (int p = 0; p < P; ++p) {
    const __m512i off = _mm512_loadu_si512(compensate + p * W);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
      _mm512_storeu_si512(acc + r * kBlockCols + p * W, _mm512_sub_epi32(c[r][p], off));
  }
}

using VnniFn = void (*)(const uint8_t*, int64_t, const int8_t*, int64_t, int64_t, const int32_t*,
                        int32_t*);
constexpr VnniFn kVnni4[5] = {nullptr, vnni_block<1, 4>, vnni_block<2, 4>, vnni_block<3, 4>,
                              vnni_block<4, 4>};
constexpr VnniFn kVnni1[5] = {nullptr, vnni_block<1, 1>, vnni_block<2, 1>, vnni_block<3, 1>,
                              vnni_block<4, 1>};

// ---- AVX2: both sides widened to 16 bits, vpmaddwd sums pairs exactly --------------------------

// One panel for R rows. A 16-byte quarter of a group holds 4 columns x 4 k; widened and
// multiplied by x's 4 values (repeated), it gives each column's two pair sums side by side.
template <int R>
__attribute__((target("avx2"))) void avx2_block(const int16_t* xs, int64_t ldx, const int8_t* w,
                                                int64_t groups, int32_t* acc) {
  __m256i c[R][4];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int i = 0; i < 4; ++i) c[r][i] = _mm256_setzero_si256();
  for (int64_t g = 0; g < groups; ++g) {
    __m256i wv[4];
#pragma GCC unroll 4
    for (int i = 0; i < 4; ++i)
      wv[i] = _mm256_cvtepi8_epi16(
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + g * kPanelGroupBytes + i * 16)));
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      int64_t four;
      std::memcpy(&four, xs + r * ldx + g * G, sizeof four);
      const __m256i xb = _mm256_set1_epi64x(four);
#pragma GCC unroll 4
      for (int i = 0; i < 4; ++i) c[r][i] = _mm256_add_epi32(c[r][i], _mm256_madd_epi16(wv[i], xb));
    }
  }
  // Each column's two pair sums are adjacent: one horizontal add of two quarters gives 8 sums,
  // in the order (0..3 of the first, 0..3 of the second) per 128-bit lane, put right by a permute.
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
    for (int i = 0; i < 4; i += 2) {
      const __m256i sums = _mm256_permute4x64_epi64(_mm256_hadd_epi32(c[r][i], c[r][i + 1]), 0xd8);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(acc + r * kBlockCols + i * 4), sums);
    }
}

// ---- epilogues: fma(float(acc), s_x * s_w, c), the same operations in every path --------------
// c is y's value (accumulate), else the bias or 0.

// The reference, and the vector paths' tail past their last whole register.
void epilogue_scalar(const int32_t* acc, float sx, const float* sw, const float* bias, int64_t n,
                     float* y, bool accumulate) {
  for (int64_t j = 0; j < n; ++j)
    y[j] = std::fma(static_cast<float>(acc[j]), sx * sw[j],
                    accumulate ? y[j]
                    : bias     ? bias[j]
                               : 0.f);
}

__attribute__((target("avx512f"))) void epilogue_avx512(const int32_t* acc, float sx,
                                                        const float* sw, const float* bias,
                                                        int64_t n, float* y, bool accumulate) {
  const __m512 vx = _mm512_set1_ps(sx);
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    const __m512 c = accumulate ? _mm512_loadu_ps(y + j)
                     : bias     ? _mm512_loadu_ps(bias + j)
                                : _mm512_setzero_ps();
    const __m512 a = _mm512_cvtepi32_ps(_mm512_loadu_si512(acc + j));
    _mm512_storeu_ps(y + j, _mm512_fmadd_ps(a, _mm512_mul_ps(vx, _mm512_loadu_ps(sw + j)), c));
  }
  epilogue_scalar(acc + j, sx, sw + j, bias ? bias + j : nullptr, n - j, y + j, accumulate);
}

__attribute__((target("avx2,fma"))) void epilogue_avx2(const int32_t* acc, float sx,
                                                       const float* sw, const float* bias,
                                                       int64_t n, float* y, bool accumulate) {
  const __m256 vx = _mm256_set1_ps(sx);
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m256 c = accumulate ? _mm256_loadu_ps(y + j)
                     : bias     ? _mm256_loadu_ps(bias + j)
                                : _mm256_setzero_ps();
    const __m256 a =
        _mm256_cvtepi32_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(acc + j)));
    _mm256_storeu_ps(y + j, _mm256_fmadd_ps(a, _mm256_mul_ps(vx, _mm256_loadu_ps(sw + j)), c));
  }
  epilogue_scalar(acc + j, sx, sw + j, bias ? bias + j : nullptr, n - j, y + j, accumulate);
}

using Epilogue = void (*)(const int32_t*, float, const float*, const float*, int64_t, float*, bool);

// Scratch that a thread reuses from call to call (a decoding step makes dozens of products).
std::vector<int8_t>& scratch_bytes() {
  thread_local std::vector<int8_t> bytes;
  return bytes;
}
std::vector<float>& scratch_scales() {
  thread_local std::vector<float> scales;
  return scales;
}

}  // namespace

namespace {

// One row: the scalar reference, and the vector paths' tail (from column `from`). `flip` (0x80)
// stores q + 128 as an unsigned byte, as the VNNI path reads x.
void quantize_row_scalar(const float* row, int64_t cols, float inv, int8_t* q, int64_t from = 0,
                         uint8_t flip = 0) {
  for (int64_t c = from; c < cols; ++c) {
    // x * inv can round a hair above 127 at the maximum: clamp.
    const auto v = static_cast<int8_t>(std::clamp(std::nearbyint(row[c] * inv), -127.f, 127.f));
    q[c] = static_cast<int8_t>(static_cast<uint8_t>(v) ^ flip);
  }
}

float amax_scalar(const float* row, int64_t cols, int64_t from = 0, float amax = 0) {
  for (int64_t c = from; c < cols; ++c) amax = std::max(amax, std::fabs(row[c]));
  return amax;
}

// The same operations 16 at a time: |x| by clearing the sign, x * inv rounded to nearest even
// (the default rounding mode, as nearbyint), clamped, narrowed with saturation (never reached).
__attribute__((target("avx512f"))) float amax_avx512(const float* row, int64_t cols) {
  __m512 m = _mm512_setzero_ps();
  int64_t c = 0;
  // max(|x|, m) keeps m when x is NaN, as std::max(amax, |x|) does.
  for (; c + 16 <= cols; c += 16) m = _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(row + c)), m);
  return amax_scalar(row, cols, c, _mm512_reduce_max_ps(m));
}

__attribute__((target("avx512f"))) void quantize_row_avx512(const float* row, int64_t cols,
                                                            float inv, int8_t* q,
                                                            uint8_t flip = 0) {
  const __m512 vinv = _mm512_set1_ps(inv), lo = _mm512_set1_ps(-127.f), hi = _mm512_set1_ps(127.f);
  const __m128i vflip = _mm_set1_epi8(static_cast<char>(flip));
  int64_t c = 0;
  for (; c + 16 <= cols; c += 16) {
    const __m512 v = _mm512_roundscale_ps(_mm512_mul_ps(_mm512_loadu_ps(row + c), vinv),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m128i bytes =
        _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(_mm512_min_ps(_mm512_max_ps(v, lo), hi)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + c), _mm_xor_si128(bytes, vflip));
  }
  quantize_row_scalar(row, cols, inv, q, c, flip);
}

// quantize_rows into the VNNI path's layout: q + 128 as bytes, rows ldq apart.
void quantize_rows_shifted(const float* x, int64_t rows, int64_t cols, int64_t ldx, int8_t* q,
                           int64_t ldq, float* scale) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x + r * ldx;
    const float amax = amax_avx512(row, cols);
    scale[r] = amax / 127.f;
    quantize_row_avx512(row, cols, amax > 0 ? 127.f / amax : 0.f, q + r * ldq, 0x80);
  }
}

}  // namespace

void quantize_rows(const float* x, int64_t rows, int64_t cols, int64_t ldx, int8_t* q, float* scale,
                   Isa isa) {
  const bool avx512 = isa == Isa::Avx512;
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x + r * ldx;
    const float amax = avx512 ? amax_avx512(row, cols) : amax_scalar(row, cols);
    scale[r] = amax / 127.f;
    const float inv = amax > 0 ? 127.f / amax : 0.f;
    if (avx512)
      quantize_row_avx512(row, cols, inv, q + r * cols);
    else
      quantize_row_scalar(row, cols, inv, q + r * cols);
  }
}

Path path_for(Isa isa) {
  if (isa == Isa::Avx512 && cpu_has_vnni()) return Path::Avx512Vnni;
  if (isa >= Isa::Avx2) return Path::Avx2;
  return Path::Scalar;
}

Panels Panels::quantize(const float* w, int64_t n, int64_t k, int64_t ldw, Isa isa) {
  if (n <= 0 || k <= 0) throw Error("int8::Panels: an empty weight");
  if (k > 130000) throw Error("int8::Panels: K = " + std::to_string(k) + " could overflow int32");
  Panels out;
  out.n_ = n;
  out.k_ = k;
  out.groups_ = (k + G - 1) / G;
  out.panels_ = (n + W - 1) / W;
  out.path_ = path_for(isa);
  out.isa_ = isa;
  const int64_t padded_n = out.panels_ * W;
  out.data_.assign(out.panels_ * out.groups_ * kPanelGroupBytes, 0);
  out.scale_.assign(padded_n, 0.f);
  out.compensate_.assign(padded_n, 0);
  std::vector<int8_t> row(k);
  for (int64_t r = 0; r < n; ++r) {
    quantize_rows(w + r * ldw, /*rows=*/1, k, ldw, row.data(), &out.scale_[r], isa);
    const int64_t p = r / W, j = r % W;
    int32_t sum = 0;
    for (int64_t c = 0; c < k; ++c) {
      out.data_[((p * out.groups_ + c / G) * W + j) * G + c % G] = row[c];
      sum += row[c];
    }
    out.compensate_[r] = 128 * sum;
  }
  return out;
}

int8_t Panels::at(int64_t row, int64_t col) const {
  return data_[(((row / W) * groups_ + col / G) * W + row % W) * G + col % G];
}

int64_t Panels::bytes() const {
  return static_cast<int64_t>(data_.size() + 4 * scale_.size() + 4 * compensate_.size());
}

const void* Panels::prepare(const int8_t* qx, int64_t m, std::vector<int8_t>& out) const {
  const int64_t padded_k = groups_ * G;
  if (path_ == Path::Avx512Vnni) {  // unsigned bytes; the padding's 128 meets zero weights
    out.assign(m * padded_k, static_cast<int8_t>(-128));
    for (int64_t r = 0; r < m; ++r) {  // q + 128 as a byte: the sign bit flipped
      const uint8_t* from = reinterpret_cast<const uint8_t*>(qx + r * k_);
      uint8_t* to = reinterpret_cast<uint8_t*>(out.data() + r * padded_k);
      for (int64_t c = 0; c < k_; ++c) to[c] = from[c] ^ 0x80;
    }
  } else if (path_ == Path::Avx2) {
    out.assign(2 * m * padded_k, 0);
    auto* xs = reinterpret_cast<int16_t*>(out.data());
    for (int64_t r = 0; r < m; ++r)
      for (int64_t c = 0; c < k_; ++c) xs[r * padded_k + c] = qx[r * k_ + c];
  } else {
    return qx;
  }
  return out.data();
}

template <typename Finish>
void Panels::run(const void* prepared, int64_t r0, int64_t r1, int64_t p0, int64_t p1,
                 const Finish& finish) const {
  const int64_t padded_k = groups_ * G, panel_bytes = groups_ * kPanelGroupBytes;
  alignas(64) int32_t block[4 * kBlockCols];
  // Panels outer, rows inner: a group of panels (16 KiB at K = 256) stays in L1 while every row
  // block streams it.
  if (path_ == Path::Avx512Vnni) {
    const auto* xu = static_cast<const uint8_t*>(prepared);
    const int64_t step = r1 - r0 == 1 ? 8 : 4;  // panels a block takes
    for (int64_t p = p0; p < p1; p += step) {
      const int64_t panels = std::min(step, p1 - p);
      for (int64_t r = r0; r < r1; r += 4) {
        const int64_t rows = std::min<int64_t>(4, r1 - r);
        const uint8_t* x = xu + r * padded_k;
        int64_t q = 0;  // 8 panels for one row, else 4, then one at a time at the edge
        auto block_at = [&](VnniFn fn, int64_t width) {
          fn(x, padded_k, data_.data() + (p + q) * panel_bytes, panel_bytes, groups_,
             compensate_.data() + (p + q) * W, block + q * W);
          q += width;
        };
        if (rows == 1)
          while (q + 8 <= panels) block_at(vnni_block<1, 8>, 8);
        while (q + 4 <= panels) block_at(kVnni4[rows], 4);
        while (q < panels) block_at(kVnni1[rows], 1);
        finish(r, rows, p * W, panels * W, block, kBlockCols);
      }
    }
  } else if (path_ == Path::Avx2) {
    const auto* xs = static_cast<const int16_t*>(prepared);
    for (int64_t p = p0; p < p1; ++p) {
      const int8_t* w = data_.data() + p * panel_bytes;
      for (int64_t r = r0; r < r1; r += 3) {
        const int64_t rows = std::min<int64_t>(3, r1 - r);
        const int16_t* x = xs + r * padded_k;
        if (rows == 3)
          avx2_block<3>(x, padded_k, w, groups_, block);
        else if (rows == 2)
          avx2_block<2>(x, padded_k, w, groups_, block);
        else
          avx2_block<1>(x, padded_k, w, groups_, block);
        finish(r, rows, p * W, W, block, kBlockCols);
      }
    }
  } else {
    const auto* qx = static_cast<const int8_t*>(prepared);
    for (int64_t p = p0; p < p1; ++p)
      for (int64_t r = r0; r < r1; ++r) {
        for (int64_t j = 0; j < W; ++j) {
          const int64_t col = p * W + j;
          int32_t sum = 0;
          if (col < n_)
            for (int64_t c = 0; c < k_; ++c) sum += int32_t{qx[r * k_ + c]} * at(col, c);
          block[j] = sum;
        }
        finish(r, 1, p * W, W, block, kBlockCols);
      }
  }
}

template <typename Finish>
void Panels::for_each_part(const void* prepared, int64_t m, int64_t parts,
                           const Finish& finish) const {
  const int64_t blocks = (m + 3) / 4;
  parts = std::max<int64_t>(1, parts);
  if (parts == 1) {
    run(prepared, 0, m, 0, panels_, finish);
  } else if (blocks < parts) {                 // a decoding step: the parts take panels (columns)
    const int64_t chunks = (panels_ + 3) / 4;  // whole groups of four panels where possible
    for_each_row_part(std::min(parts, chunks), [&](RowPart part) {
      const int64_t first = std::min(panels_, chunks * part.first / part.stride * 4),
                    last = std::min(panels_, chunks * (part.first + 1) / part.stride * 4);
      run(prepared, 0, m, first, last, finish);
    });
  } else {
    for_each_row_part(std::min(parts, blocks), [&](RowPart part) {
      const int64_t from = std::min(m, blocks * part.first / part.stride * 4),
                    to = std::min(m, blocks * (part.first + 1) / part.stride * 4);
      run(prepared, from, to, 0, panels_, finish);
    });
  }
}

void Panels::sums(const int8_t* qx, int64_t m, int32_t* acc) const {
  for_each_part(
      prepare(qx, m, scratch_bytes()), m, 1,
      [&](int64_t r, int64_t rows, int64_t col, int64_t cols, const int32_t* block, int64_t ld) {
        cols = std::min(cols, n_ - col);
        for (int64_t i = 0; i < rows; ++i)
          std::copy_n(block + i * ld, cols, acc + (r + i) * n_ + col);
      });
}

void Panels::finish_parts(const void* prepared, const float* scale_x, int64_t m, const float* bias,
                          float* y, int64_t ldy, bool accumulate, int64_t parts) const {
  const Epilogue epilogue = path_ == Path::Avx512Vnni ? epilogue_avx512
                            : path_ == Path::Avx2     ? epilogue_avx2
                                                      : epilogue_scalar;
  for_each_part(
      prepared, m, parts,
      [&](int64_t r, int64_t rows, int64_t col, int64_t cols, const int32_t* block, int64_t ld) {
        cols = std::min(cols, n_ - col);
        for (int64_t i = 0; i < rows; ++i)
          epilogue(block + i * ld, scale_x[r + i], scale_.data() + col, bias ? bias + col : nullptr,
                   cols, y + (r + i) * ldy + col, accumulate);
      });
}

void Panels::multiply(const int8_t* qx, const float* scale_x, int64_t m, const float* bias,
                      float* y, int64_t ldy, bool accumulate, int64_t parts) const {
  finish_parts(prepare(qx, m, scratch_bytes()), scale_x, m, bias, y, ldy, accumulate, parts);
}

void Panels::multiply(const float* x, int64_t m, int64_t ldx, const float* bias, float* y,
                      int64_t ldy, bool accumulate, int64_t parts) const {
  std::vector<float>& sx = scratch_scales();
  sx.resize(m);
  if (path_ == Path::Avx512Vnni) {  // straight into the layout the blocks read
    const int64_t padded_k = groups_ * G;
    std::vector<int8_t>& xu = scratch_bytes();
    xu.assign(m * padded_k, static_cast<int8_t>(-128));  // the padding's 128 meets zero weights
    quantize_rows_shifted(x, m, k_, ldx, xu.data(), padded_k, sx.data());
    finish_parts(xu.data(), sx.data(), m, bias, y, ldy, accumulate, parts);
    return;
  }
  thread_local std::vector<int8_t> qx;  // the quantized rows, behind prepare()'s copy
  qx.resize(m * k_);
  quantize_rows(x, m, k_, ldx, qx.data(), sx.data(), isa_);
  multiply(qx.data(), sx.data(), m, bias, y, ldy, accumulate, parts);
}

}  // namespace attnkit::kernels::int8

#pragma GCC diagnostic pop
