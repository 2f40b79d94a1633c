// The int8 products (src/kernels/int8_gemm.h) on every path this CPU runs, against an exact
// integer reference written here: the sums bit for bit, the float outputs bit for bit, and the
// quantization's error within its bounds.

#include "kernels/gemm/int8_gemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <tuple>

namespace attnkit::kernels::int8 {
namespace {

std::vector<float> random_matrix(int64_t rows, int64_t cols, std::mt19937& rng, float spread) {
  std::normal_distribution<float> normal(0.f, spread);
  std::vector<float> m(rows * cols);
  for (auto& x : m) x = normal(rng);
  return m;
}

const char* name(Path p) {
  return p == Path::Avx512Vnni ? "avx512-vnni" : p == Path::Avx2 ? "avx2" : "scalar";
}

TEST(Int8Quantize, EachRowWithinHalfAStepAndTheMaximumAt127) {
  std::mt19937 rng(3);
  const int64_t rows = 5, cols = 37;
  auto x = random_matrix(rows, cols, rng, 2.f);
  std::fill(x.begin() + 2 * cols, x.begin() + 3 * cols, 0.f);  // an all-zero row
  x[4 * cols + 7] = -1e-30f;                                   // a tiny one
  std::vector<int8_t> q(rows * cols);
  std::vector<float> scale(rows);
  quantize_rows(x.data(), rows, cols, cols, q.data(), scale.data());
  for (int64_t r = 0; r < rows; ++r) {
    int largest = 0;
    for (int64_t c = 0; c < cols; ++c) {
      const float v = x[r * cols + c];
      EXPECT_LE(std::fabs(v - scale[r] * q[r * cols + c]), scale[r] / 2 * (1 + 1e-6f) + 1e-38f)
          << r << "," << c;
      if (v == 0.f) EXPECT_EQ(q[r * cols + c], 0);
      largest = std::max(largest, std::abs(int{q[r * cols + c]}));
    }
    EXPECT_EQ(largest, r == 2 ? 0 : 127) << "row " << r;
  }
  EXPECT_EQ(scale[2], 0.f);
  // Every ISA's loop gives the same bytes and scales (a row long enough for the vector loop).
  const int64_t wide = 70;
  auto y = random_matrix(3, wide, rng, 5.f);
  std::vector<int8_t> first(3 * wide), other(3 * wide);
  std::vector<float> first_scale(3), other_scale(3);
  quantize_rows(y.data(), 3, wide, wide, first.data(), first_scale.data(), Isa::Scalar);
  for (Isa isa : supported_isas()) {
    quantize_rows(y.data(), 3, wide, wide, other.data(), other_scale.data(), isa);
    EXPECT_EQ(other, first) << to_string(isa);
    EXPECT_EQ(std::memcmp(other_scale.data(), first_scale.data(), 3 * sizeof(float)), 0);
  }
}

// The exact reference: int64 sums of the quantized values, read back from the panels.
std::vector<int64_t> reference_sums(const Panels& w, const std::vector<int8_t>& qx, int64_t m) {
  std::vector<int64_t> acc(m * w.n());
  for (int64_t r = 0; r < m; ++r)
    for (int64_t n = 0; n < w.n(); ++n) {
      int64_t sum = 0;
      for (int64_t c = 0; c < w.k(); ++c) sum += int64_t{qx[r * w.k() + c]} * w.at(n, c);
      acc[r * w.n() + n] = sum;
    }
  return acc;
}

using Shape = std::tuple<int64_t, int64_t, int64_t>;  // m, k, n

class Int8Gemm : public ::testing::TestWithParam<Shape> {};

// Every path's sums equal the exact ones, and its outputs the scalar epilogue's, bit for bit:
// shapes with K and N off the group and panel widths, and rows off the row blocks.
TEST_P(Int8Gemm, EveryPathEqualsTheExactReferenceBitForBit) {
  const auto [m, k, n] = GetParam();
  std::mt19937 rng(static_cast<unsigned>(m * 1000 + k * 10 + n));
  const auto w = random_matrix(n, k, rng, 0.5f);
  const auto x = random_matrix(m, k, rng, 3.f);
  const auto bias = random_matrix(1, n, rng, 1.f);
  std::vector<int8_t> qx(m * k);
  std::vector<float> sx(m);
  quantize_rows(x.data(), m, k, k, qx.data(), sx.data());
  std::vector<float> first;
  for (Isa isa : supported_isas()) {
    const Panels panels = Panels::quantize(w.data(), n, k, /*ldw=*/k, isa);
    SCOPED_TRACE(name(panels.path()));
    const auto exact = reference_sums(panels, qx, m);
    std::vector<int32_t> acc(m * n);
    panels.sums(qx.data(), m, acc.data());
    for (int64_t i = 0; i < m * n; ++i) ASSERT_EQ(acc[i], exact[i]) << "element " << i;
    std::vector<float> y(m * n);
    panels.multiply(x.data(), m, /*ldx=*/k, bias.data(), y.data(), /*ldy=*/n);
    for (int64_t r = 0; r < m; ++r)
      for (int64_t j = 0; j < n; ++j) {
        const float want =
            std::fma(static_cast<float>(exact[r * n + j]), sx[r] * panels.scales()[j], bias[j]);
        ASSERT_EQ(std::memcmp(&y[r * n + j], &want, sizeof want), 0)
            << r << "," << j << ": " << y[r * n + j] << " vs " << want;
      }
    if (first.empty()) first = y;
    EXPECT_EQ(std::memcmp(first.data(), y.data(), y.size() * sizeof(float)), 0);
  }
}

// Split between threads by rows or by panels, and accumulating onto y, a product gives the same
// bits as on one thread: every element is one exact sum and one fma.
TEST_P(Int8Gemm, ThreadsAndAccumulatingGiveTheSameBits) {
  const auto [m, k, n] = GetParam();
  std::mt19937 rng(static_cast<unsigned>(m * 7 + k * 3 + n));
  const auto w = random_matrix(n, k, rng, 0.5f);
  const auto x = random_matrix(m, k, rng, 3.f);
  const auto start = random_matrix(m, n, rng, 1.f);
  for (Isa isa : supported_isas()) {
    const Panels panels = Panels::quantize(w.data(), n, k, /*ldw=*/k, isa);
    SCOPED_TRACE(name(panels.path()));
    std::vector<float> one(m * n), added = start;
    panels.multiply(x.data(), m, k, /*bias=*/nullptr, one.data(), n);
    panels.multiply(x.data(), m, k, nullptr, added.data(), n, /*accumulate=*/true);
    std::vector<int8_t> qx(m * k);
    std::vector<float> sx(m);
    quantize_rows(x.data(), m, k, k, qx.data(), sx.data());
    for (int64_t i = 0; i < m * n; ++i) {
      // Accumulating is fma(sum, s_x s_w, y): the exact sum's own epilogue onto y's value.
      const int64_t r = i / n, j = i % n;
      int64_t sum = 0;
      for (int64_t c = 0; c < k; ++c) sum += int64_t{qx[r * k + c]} * panels.at(j, c);
      const float exact = std::fma(static_cast<float>(sum), sx[r] * panels.scales()[j], start[i]);
      ASSERT_EQ(std::memcmp(&added[i], &exact, sizeof exact), 0) << r << "," << j;
    }
    for (int64_t parts : {2, 3}) {
      std::vector<float> split(m * n);
      panels.multiply(x.data(), m, k, nullptr, split.data(), n, /*accumulate=*/false, parts);
      EXPECT_EQ(std::memcmp(split.data(), one.data(), one.size() * sizeof(float)), 0)
          << parts << " parts";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, Int8Gemm,
                         ::testing::Values(Shape{1, 1, 1}, Shape{1, 256, 768}, Shape{1, 64, 200},
                                           Shape{3, 7, 15}, Shape{4, 259, 16}, Shape{5, 64, 33},
                                           Shape{9, 130, 100}, Shape{17, 256, 70},
                                           Shape{2, 40, 1000}));

// The largest magnitudes on both sides: x's bytes at 0 and 255 after the VNNI path's +128, and
// every product at +-127 * 127, summed over a long K without overflow or saturation.
TEST(Int8Gemm, ExtremesSumExactly) {
  const int64_t m = 3, k = 4099, n = 20;
  std::vector<float> w(n * k), x(m * k);
  for (int64_t i = 0; i < n * k; ++i) w[i] = (i % 3 == 0) ? -1.f : 1.f;
  for (int64_t i = 0; i < m * k; ++i) x[i] = (i / k == 1) ? -1.f : (i % 2 ? 1.f : -1.f);
  std::vector<int8_t> qx(m * k);
  std::vector<float> sx(m);
  quantize_rows(x.data(), m, k, k, qx.data(), sx.data());
  for (Isa isa : supported_isas()) {
    const Panels panels = Panels::quantize(w.data(), n, k, k, isa);
    SCOPED_TRACE(name(panels.path()));
    const auto exact = reference_sums(panels, qx, m);
    std::vector<int32_t> acc(m * n);
    panels.sums(qx.data(), m, acc.data());
    for (int64_t i = 0; i < m * n; ++i) ASSERT_EQ(acc[i], exact[i]) << "element " << i;
    // x's row 1 is all -1; W's row 0 is -1 at every third column from 0, +1 elsewhere.
    EXPECT_EQ(exact[n], -127LL * 127 * (k - 2 * ((k + 2) / 3)));
  }
}

// The float result is within the bound the two quantizations allow: per term,
// |x w - sx qx sw qw| <= |x| sw / 2 + |w| sx / 2 + sx sw / 4.
TEST(Int8Gemm, TheProductIsWithinTheQuantizationBound) {
  std::mt19937 rng(11);
  const int64_t m = 6, k = 256, n = 50;
  const auto w = random_matrix(n, k, rng, 0.1f);
  const auto x = random_matrix(m, k, rng, 1.f);
  const Panels panels = Panels::quantize(w.data(), n, k, k);
  std::vector<int8_t> qx(m * k);
  std::vector<float> sx(m), y(m * n);
  quantize_rows(x.data(), m, k, k, qx.data(), sx.data());
  panels.multiply(x.data(), m, k, /*bias=*/nullptr, y.data(), n);
  for (int64_t r = 0; r < m; ++r)
    for (int64_t j = 0; j < n; ++j) {
      double exact = 0, bound = 0;
      const double sw = panels.scales()[j];
      for (int64_t c = 0; c < k; ++c) {
        exact += double{x[r * k + c]} * w[j * k + c];
        bound +=
            std::fabs(x[r * k + c]) * sw / 2 + std::fabs(w[j * k + c]) * sx[r] / 2 + sx[r] * sw / 4;
      }
      EXPECT_LE(std::fabs(y[r * n + j] - exact), bound * 1.001 + 1e-6) << r << "," << j;
    }
  // One byte per weight, padded to whole panels (16 columns) and groups (4), plus a float scale
  // and an int32 compensation per padded column: a quarter of the float weight at
  // widths that are multiples of 16.
  EXPECT_EQ(panels.bytes(), 64 * 256 + 4 * 64 + 4 * 64);
}

}  // namespace
}  // namespace attnkit::kernels::int8
