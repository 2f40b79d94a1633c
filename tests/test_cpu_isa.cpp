// The one CPU dispatch (kernels/cpu_isa.h): names, the override, and that the kernels follow it.

#include "attnkit/kernels/cpu_isa.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstring>
#include <limits>

#include "attnkit/core/error.h"
#include "attnkit/kernels/matmul.h"
#include "kernels/simd.h"
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
  }
}

}  // namespace
}  // namespace attnkit
