#include "int8_gemm.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "attnkit/core/error.h"

namespace attnkit::kernels::int8 {
namespace {

constexpr int64_t W = Panels::kWidth, G = Panels::kGroup;
constexpr int64_t kPanelGroupBytes = W * G;  // one group of one panel: 64 bytes

bool cpu_has_vnni() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512bw");
}

// ---- AVX-512 VNNI: xu = q_x + 128 (unsigned) times q_w (signed), 4 bytes per int32 lane --------

// acc[r, p * 16 + j] for R rows x P panels, minus the compensation 128 sum_k q_w.
template <int R, int P>
__attribute__((target("avx512f,avx512bw,avx512vnni"))) void vnni_block(
    const uint8_t* xu, int64_t ldx, const int8_t* w, int64_t panel_bytes, int64_t groups,
    const int32_t* compensate, int32_t* acc, int64_t ldacc) {
  __m512i c[R][P];
  for (int r = 0; r < R; ++r)
    for (int p = 0; p < P; ++p) c[r][p] = _mm512_setzero_si512();
  for (int64_t g = 0; g < groups; ++g) {
    __m512i wv[P];
    for (int p = 0; p < P; ++p)
      wv[p] = _mm512_loadu_si512(w + p * panel_bytes + g * kPanelGroupBytes);
    for (int r = 0; r < R; ++r) {
      int32_t four;
      std::memcpy(&four, xu + r * ldx + g * G, sizeof four);
      const __m512i xb = _mm512_set1_epi32(four);
      for (int p = 0; p < P; ++p) c[r][p] = _mm512_dpbusd_epi32(c[r][p], xb, wv[p]);
    }
  }
  for (int p = 0; p < P; ++p) {
    const __m512i off = _mm512_loadu_si512(compensate + p * W);
    for (int r = 0; r < R; ++r)
      _mm512_storeu_si512(acc + r * ldacc + p * W, _mm512_sub_epi32(c[r][p], off));
  }
}

template <int R>
void vnni_rows(const uint8_t* xu, int64_t ldx, const int8_t* data, int64_t panels, int64_t groups,
               const int32_t* compensate, int32_t* acc, int64_t ldacc) {
  const int64_t panel_bytes = groups * kPanelGroupBytes;
  int64_t p = 0;
  for (; p + 4 <= panels; p += 4)
    vnni_block<R, 4>(xu, ldx, data + p * panel_bytes, panel_bytes, groups, compensate + p * W,
                     acc + p * W, ldacc);
  for (; p < panels; ++p)
    vnni_block<R, 1>(xu, ldx, data + p * panel_bytes, panel_bytes, groups, compensate + p * W,
                     acc + p * W, ldacc);
}

// ---- AVX2: both sides widened to 16 bits, vpmaddwd sums pairs exactly --------------------------

// One panel for R rows. A 16-byte quarter of a group holds 4 columns x 4 k; widened and
// multiplied by x's 4 values (repeated), it gives each column's two pair sums side by side.
template <int R>
__attribute__((target("avx2"))) void avx2_block(const int16_t* xs, int64_t ldx, const int8_t* w,
                                                int64_t groups, int32_t* acc, int64_t ldacc) {
  __m256i c[R][4];
  for (int r = 0; r < R; ++r)
    for (int i = 0; i < 4; ++i) c[r][i] = _mm256_setzero_si256();
  for (int64_t g = 0; g < groups; ++g) {
    __m256i wv[4];
    for (int i = 0; i < 4; ++i)
      wv[i] = _mm256_cvtepi8_epi16(
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + g * kPanelGroupBytes + i * 16)));
    for (int r = 0; r < R; ++r) {
      int64_t four;
      std::memcpy(&four, xs + r * ldx + g * G, sizeof four);
      const __m256i xb = _mm256_set1_epi64x(four);
      for (int i = 0; i < 4; ++i) c[r][i] = _mm256_add_epi32(c[r][i], _mm256_madd_epi16(wv[i], xb));
    }
  }
  for (int r = 0; r < R; ++r)
    for (int i = 0; i < 4; ++i) {
      alignas(32) int32_t pairs[8];
      _mm256_store_si256(reinterpret_cast<__m256i*>(pairs), c[r][i]);
      for (int j = 0; j < 4; ++j) acc[r * ldacc + i * 4 + j] = pairs[2 * j] + pairs[2 * j + 1];
    }
}

// ---- epilogues: fma(float(acc), s_x * s_w, b), the same operations in every path --------------

// The reference, and the vector paths' tail past their last whole register.
void epilogue_scalar(const int32_t* acc, float sx, const float* sw, const float* bias, int64_t n,
                     float* y) {
  for (int64_t j = 0; j < n; ++j)
    y[j] = std::fma(static_cast<float>(acc[j]), sx * sw[j], bias ? bias[j] : 0.f);
}

__attribute__((target("avx512f"))) void epilogue_avx512(const int32_t* acc, float sx,
                                                        const float* sw, const float* bias,
                                                        int64_t n, float* y) {
  const __m512 vx = _mm512_set1_ps(sx);
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    const __m512 b = bias ? _mm512_loadu_ps(bias + j) : _mm512_setzero_ps();
    const __m512 a = _mm512_cvtepi32_ps(_mm512_loadu_si512(acc + j));
    _mm512_storeu_ps(y + j, _mm512_fmadd_ps(a, _mm512_mul_ps(vx, _mm512_loadu_ps(sw + j)), b));
  }
  epilogue_scalar(acc + j, sx, sw + j, bias ? bias + j : nullptr, n - j, y + j);
}

__attribute__((target("avx2,fma"))) void epilogue_avx2(const int32_t* acc, float sx,
                                                       const float* sw, const float* bias,
                                                       int64_t n, float* y) {
  const __m256 vx = _mm256_set1_ps(sx);
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m256 b = bias ? _mm256_loadu_ps(bias + j) : _mm256_setzero_ps();
    const __m256 a =
        _mm256_cvtepi32_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(acc + j)));
    _mm256_storeu_ps(y + j, _mm256_fmadd_ps(a, _mm256_mul_ps(vx, _mm256_loadu_ps(sw + j)), b));
  }
  epilogue_scalar(acc + j, sx, sw + j, bias ? bias + j : nullptr, n - j, y + j);
}

}  // namespace

void quantize_rows(const float* x, int64_t rows, int64_t cols, int64_t ldx, int8_t* q,
                   float* scale) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x + r * ldx;
    float amax = 0;
    for (int64_t c = 0; c < cols; ++c) amax = std::max(amax, std::fabs(row[c]));
    scale[r] = amax / 127.f;
    const float inv = amax > 0 ? 127.f / amax : 0.f;
    for (int64_t c = 0; c < cols; ++c) {
      // x * inv can round a hair above 127 at the maximum: clamp.
      const float v = std::nearbyint(row[c] * inv);
      q[r * cols + c] = static_cast<int8_t>(std::clamp(v, -127.f, 127.f));
    }
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
  const int64_t padded_n = out.panels_ * W;
  out.data_.assign(out.panels_ * out.groups_ * kPanelGroupBytes, 0);
  out.scale_.assign(padded_n, 0.f);
  out.compensate_.assign(padded_n, 0);
  std::vector<int8_t> row(k);
  for (int64_t r = 0; r < n; ++r) {
    quantize_rows(w + r * ldw, /*rows=*/1, k, ldw, row.data(), &out.scale_[r]);
    const int64_t p = r / W, j = r % W;
    int32_t sum = 0;
    for (int64_t c = 0; c < k; ++c) {
      out.data_[((p * out.groups_ + c / G) * W + j) * G + c % G] = row[c];
      sum += row[c];
    }
    out.compensate_[r] = 128 * sum;
  }
  out.scale_.resize(n);
  return out;
}

int8_t Panels::at(int64_t row, int64_t col) const {
  return data_[(((row / W) * groups_ + col / G) * W + row % W) * G + col % G];
}

int64_t Panels::bytes() const {
  return static_cast<int64_t>(data_.size() + 4 * scale_.size() + 4 * compensate_.size());
}

void Panels::sums(const int8_t* qx, int64_t m, int32_t* acc) const {
  const int64_t padded_k = groups_ * G, padded_n = panels_ * W;
  std::vector<int32_t> block(4 * padded_n);
  // Each path reads x padded to whole groups; the padded weights are zero.
  for (int64_t r0 = 0; r0 < m; r0 += 4) {
    const int64_t rows = std::min<int64_t>(4, m - r0);
    if (path_ == Path::Avx512Vnni) {
      std::vector<uint8_t> xu(rows * padded_k, 128);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < k_; ++c)
          xu[r * padded_k + c] = static_cast<uint8_t>(qx[(r0 + r) * k_ + c] + 128);
      const auto run = rows == 4   ? vnni_rows<4>
                       : rows == 3 ? vnni_rows<3>
                       : rows == 2 ? vnni_rows<2>
                                   : vnni_rows<1>;
      run(xu.data(), padded_k, data_.data(), panels_, groups_, compensate_.data(), block.data(),
          padded_n);
    } else if (path_ == Path::Avx2) {
      std::vector<int16_t> xs(rows * padded_k, 0);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < k_; ++c) xs[r * padded_k + c] = qx[(r0 + r) * k_ + c];
      for (int64_t p = 0; p < panels_; ++p) {
        const int8_t* w = data_.data() + p * groups_ * kPanelGroupBytes;
        int64_t r = 0;
        for (; r + 2 <= rows; r += 2)
          avx2_block<2>(xs.data() + r * padded_k, padded_k, w, groups_,
                        block.data() + r * padded_n + p * W, padded_n);
        if (r < rows)
          avx2_block<1>(xs.data() + r * padded_k, padded_k, w, groups_,
                        block.data() + r * padded_n + p * W, padded_n);
      }
    } else {
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t col = 0; col < n_; ++col) {
          int32_t sum = 0;
          for (int64_t c = 0; c < k_; ++c) sum += int32_t{qx[(r0 + r) * k_ + c]} * at(col, c);
          block[r * padded_n + col] = sum;
        }
    }
    for (int64_t r = 0; r < rows; ++r)
      std::copy(block.data() + r * padded_n, block.data() + r * padded_n + n_, acc + (r0 + r) * n_);
  }
}

void Panels::multiply(const int8_t* qx, const float* scale_x, int64_t m, const float* bias,
                      float* y, int64_t ldy) const {
  std::vector<int32_t> acc(m * n_);
  sums(qx, m, acc.data());
  const auto epilogue = path_ == Path::Avx512Vnni ? epilogue_avx512
                        : path_ == Path::Avx2     ? epilogue_avx2
                                                  : epilogue_scalar;
  for (int64_t r = 0; r < m; ++r)
    epilogue(acc.data() + r * n_, scale_x[r], scale_.data(), bias, n_, y + r * ldy);
}

void Panels::multiply(const float* x, int64_t m, int64_t ldx, const float* bias, float* y,
                      int64_t ldy) const {
  std::vector<int8_t> qx(m * k_);
  std::vector<float> sx(m);
  quantize_rows(x, m, k_, ldx, qx.data(), sx.data());
  multiply(qx.data(), sx.data(), m, bias, y, ldy);
}

}  // namespace attnkit::kernels::int8
