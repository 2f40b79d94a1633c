// The one CPU dispatch (kernels/cpu_isa.h): names, the override, and that the kernels follow it.

#include "attnkit/kernels/cpu/cpu_isa.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "attnkit/core/error.h"
#include "attnkit/kernels/gemm/matmul.h"
#include "kernels/cpu/simd.h"
#include "testing.h"

namespace attnkit {
namespace {

using kernels::Isa;

TEST(CpuIsa, NamesRoundTripAndUnknownOnesAreRefusedWithTheValidOnes) {
  for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512})
    EXPECT_EQ(kernels::parse_isa(kernels::to_string(isa)), isa);
  EXPECT_EQ(kernels::parse_isa("AVX512"), Isa::Avx512);
  try {
    kernels::parse_isa("sse3");
    FAIL() << "sse3 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("scalar | avx2 | avx512"), std::string::npos) << e.what();
  }
}

TEST(CpuIsa, SupportedIsasRunFromScalarToTheDetectedOne) {
  const auto isas = kernels::supported_isas();
  ASSERT_FALSE(isas.empty());
  EXPECT_EQ(isas.front(), Isa::Scalar);
  EXPECT_EQ(isas.back(), kernels::detected_isa());
  for (size_t i = 1; i < isas.size(); ++i)
    EXPECT_EQ(static_cast<int>(isas[i]), static_cast<int>(isas[i - 1]) + 1);
}

TEST(CpuIsa, AnIsaTheCpuLacksIsRefusedAndTheActiveOneKept) {
  const Isa before = kernels::cpu_isa();
  for (Isa isa : {Isa::Avx2, Isa::Avx512}) {
    if (kernels::cpu_supports(isa)) continue;
    EXPECT_THROW(kernels::set_cpu_isa(isa), Error);
    EXPECT_EQ(kernels::cpu_isa(), before);
  }
  if (kernels::detected_isa() == Isa::Avx512) GTEST_SKIP() << "this CPU runs every ISA";
}

// Every ISA the CPU runs gives the same product to rounding, and ScopedIsa restores the one
// before it.
TEST(CpuIsa, EachIsaComputesTheSameProductAndTheScopeRestores) {
  at::manual_seed(3);
  auto a = at::randn({37, 70}), b = at::randn({70, 45});
  const auto expected = at::matmul(a.to(at::kDouble), b.to(at::kDouble)).to(at::kFloat);
  const Isa before = kernels::cpu_isa();
  for (Isa isa : kernels::supported_isas()) {
    kernels::ScopedIsa scope(isa);
    EXPECT_EQ(kernels::cpu_isa(), isa);
    auto out = at::empty({37, 45});
    kernels::matmul(a, b, out);
    EXPECT_TRUE(testing::close(out, expected, 1e-4, 1e-4)) << kernels::to_string(isa);
  }
  EXPECT_EQ(kernels::cpu_isa(), before);
}

// The row maximum (the softmaxes' shift) on every ISA, whichever of its running maxima or its
// tail holds the largest element, and -inf for a row masked whole.
TEST(CpuIsa, EachIsaFindsTheMaximumWhereverItIs) {
  at::manual_seed(5);
  for (int n : {1, 7, 8, 9, 31, 32, 33, 40, 63, 64, 65, 100, 512}) {
    auto x = at::randn({n});
    for (int at = 0; at < n; ++at) {
      auto y = x.clone();
      y[at] = 10.f;
      for (Isa isa : kernels::supported_isas()) {
        kernels::ScopedIsa scope(isa);
        EXPECT_EQ(kernels::simd::max_of(y.data_ptr<float>(), n), 10.f)
            << kernels::to_string(isa) << " n " << n << " at " << at;
      }
    }
    auto masked = at::full({n}, -std::numeric_limits<float>::infinity());
    for (Isa isa : kernels::supported_isas()) {
      kernels::ScopedIsa scope(isa);
      EXPECT_EQ(kernels::simd::max_of(masked.data_ptr<float>(), n),
                -std::numeric_limits<float>::infinity());
    }
  }
}

// The decoding step's ReLU on every ISA: std::max(x, 0.f)'s bits at every tail length, -0 and NaN
// kept as they are (a max the other way round would turn both into +0).
TEST(CpuIsa, EachIsaRectifiesAsStdMax) {
  at::manual_seed(6);
  for (int n : {0, 1, 7, 8, 9, 15, 16, 17, 33, 1024}) {
    auto x = at::randn({n});
    if (n > 2) {
      x[0] = -0.f;
      x[1] = std::numeric_limits<float>::quiet_NaN();
      x[2] = -std::numeric_limits<float>::infinity();
    }
    std::vector<float> expected(x.data_ptr<float>(), x.data_ptr<float>() + n);
    for (float& v : expected) v = std::max(v, 0.f);
    for (Isa isa : kernels::supported_isas()) {
      kernels::ScopedIsa scope(isa);
      auto y = x.clone();
      kernels::simd::relu_inplace(y.data_ptr<float>(), n);
      // (n = 0: no bytes, and memcmp may not be given the empty tensor's null pointer)
      EXPECT_TRUE(n == 0 ||
                  std::memcmp(y.data_ptr<float>(), expected.data(), sizeof(float) * n) == 0)
          << kernels::to_string(isa) << " n " << n;
    }
  }
}

// The AVX-512 exponentials (the attention kernel's, the loss's, the searches' log-softmax) are the
// AVX2 ones lane for lane and sum in the AVX2 loop's order: the same bits, values and sum, at
// every length's tail, with -inf (masked) scores and underflowing ones.
TEST(CpuIsa, Avx512ExponentialsHaveTheAvx2Bits) {
  if (!kernels::cpu_supports(Isa::Avx512)) GTEST_SKIP() << "no AVX-512 on this CPU";
  at::manual_seed(4);
  for (int n : {0, 1, 7, 8, 9, 15, 16, 17, 24, 31, 33, 100, 2767}) {
    auto s = at::randn({n}) * 30;  // down to -90 and beyond: exp underflows to exactly 0
    if (n > 3) s[2] = -std::numeric_limits<float>::infinity();
    const float m = n ? s.max().item<float>() : 0.f;
    auto p2 = at::empty({n}), p512 = at::empty({n});
    const float sum2 =
        kernels::simd::exp_shift_avx2(s.data_ptr<float>(), p2.data_ptr<float>(), n, m);
    const float sum512 =
        kernels::simd::exp_shift_avx512(s.data_ptr<float>(), p512.data_ptr<float>(), n, m);
    EXPECT_TRUE(at::equal(p2, p512)) << n;
    EXPECT_EQ(std::memcmp(&sum2, &sum512, sizeof(float)), 0) << n << ": " << sum2 << " " << sum512;
    // The base-2 ones (the attention kernel's long rows): scores down to -126 and beyond.
    const float two2 = kernels::simd::exp_shift_avx2<kernels::simd::Base::Two>(
        s.data_ptr<float>(), p2.data_ptr<float>(), n, m);
    const float two512 = kernels::simd::exp_shift_avx512<kernels::simd::Base::Two>(
        s.data_ptr<float>(), p512.data_ptr<float>(), n, m);
    EXPECT_TRUE(at::equal(p2, p512)) << "base 2, " << n;
    EXPECT_EQ(std::memcmp(&two2, &two512, sizeof(float)), 0) << "base 2, " << n;
  }
}

// 2^(s - m) on every ISA within 2 ulp of the double-precision value (the vector polynomial's
// bound; the scalar loop calls std::exp2), on dense inputs over the whole normal range and at
// the reduction's edges (r = +-0.5), exactly 0 below -126 and for -inf, and the returned sum
// equal to the sum of what was stored.
TEST(CpuIsa, BaseTwoExponentialsAreWithinTwoUlpOnEveryIsa) {
  std::vector<float> s;
  for (float x = -126.f; x <= 0.f; x += 0.0137f) s.push_back(x);
  for (int e = -126; e <= 0; ++e)
    for (float d : {-0.5f, 0.5f, -0.49999997f, 0.49999997f, 0.f})
      if (e + d <= 0.f && e + d >= -126.f) s.push_back(static_cast<float>(e) + d);
  const size_t normal = s.size();
  for (float x : {-126.0001f, -127.f, -150.f, -1e30f, -std::numeric_limits<float>::infinity()})
    s.push_back(x);
  for (Isa isa : kernels::supported_isas()) {
    kernels::ScopedIsa scope(isa);
    std::vector<float> p(s.size());
    const float sum =
        kernels::simd::exp2_shift(s.data(), p.data(), static_cast<int>(s.size()), 0.f);
    double worst = 0, stored = 0;
    for (size_t j = 0; j < normal; ++j) {
      const double exact = std::exp2(static_cast<double>(s[j]));
      const double ulp =
          std::nextafter(static_cast<float>(exact), INFINITY) - static_cast<float>(exact);
      worst = std::max(worst, std::abs(p[j] - exact) / ulp);
    }
    for (size_t j = normal; j < s.size(); ++j)
      EXPECT_EQ(p[j], 0.f) << s[j] << " on " << to_string(isa);
    for (float x : p) stored += x;
    EXPECT_LE(worst, 2.0) << to_string(isa);
    EXPECT_NEAR(sum, stored, 1e-5 * stored) << to_string(isa);
  }
}

}  // namespace
}  // namespace attnkit
