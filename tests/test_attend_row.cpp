// One query's attention over its keys and values (src/kernels/attend_row.h), as decoding attends
// over its caches: every ISA against a softmax in double, rows with nothing kept, the bits a
// source padded at the end gives against the source alone, and positions read through pointers.

#include "kernels/ops/attend_row.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "attnkit/kernels/cpu/cpu_isa.h"

namespace attnkit {
namespace {

using kernels::Isa;

struct Result {
  std::vector<float> weights, ctx;
};

Result attend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const bool* keep,
              float scale) {
  const int64_t n = k.size(0), d = k.size(1);
  Result r{std::vector<float>(n, -1.f), std::vector<float>(d, -1.f)};
  kernels::attend_row(q.data_ptr<float>(), k.data_ptr<float>(), v.data_ptr<float>(), n, d, keep,
                      scale, r.weights.data(), r.ctx.data());
  return r;
}

TEST(AttendRow, EveryIsaMatchesASoftmaxInDouble) {
  at::manual_seed(11);
  for (int64_t d : {8, 16, 48, 64, 100, 128})
    for (int64_t n : {1, 2, 5, 16, 17, 33}) {
      const auto q = at::randn({d}), k = at::randn({n, d}), v = at::randn({n, d});
      const float scale = 1.f / std::sqrt(static_cast<float>(d));
      std::vector<char> keep(n);
      for (int64_t j = 0; j < n; ++j) keep[j] = j % 3 != 1 || n == 1;
      for (bool masked : {false, true}) {
        const bool* kp = masked ? reinterpret_cast<const bool*>(keep.data()) : nullptr;
        // The reference: scores in double, -inf where not kept.
        auto s = at::matmul(k.to(at::kDouble), q.to(at::kDouble)) * scale;
        if (masked)
          for (int64_t j = 0; j < n; ++j)
            if (!keep[j]) s[j] = -std::numeric_limits<double>::infinity();
        const auto w = at::softmax(s, 0), ctx = at::matmul(w, v.to(at::kDouble));
        for (Isa isa : kernels::supported_isas()) {
          kernels::ScopedIsa scope(isa);
          SCOPED_TRACE(::testing::Message()
                       << to_string(isa) << " d " << d << " n " << n << (masked ? " masked" : ""));
          const auto r = attend(q, k, v, kp, scale);
          for (int64_t j = 0; j < n; ++j) {
            EXPECT_NEAR(r.weights[j], w[j].item<double>(), 1e-6) << "weight " << j;
            if (masked && !keep[j]) EXPECT_EQ(r.weights[j], 0.f) << "weight " << j;
          }
          for (int64_t c = 0; c < d; ++c) EXPECT_NEAR(r.ctx[c], ctx[c].item<double>(), 1e-5);
        }
      }
    }
}

TEST(AttendRow, NothingKeptGivesZerosOnEveryIsa) {
  at::manual_seed(12);
  const auto q = at::randn({64}), k = at::randn({5, 64}), v = at::randn({5, 64});
  const bool none[5] = {false, false, false, false, false};
  for (Isa isa : kernels::supported_isas()) {
    kernels::ScopedIsa scope(isa);
    const auto r = attend(q, k, v, none, 0.125f);
    for (float w : r.weights) EXPECT_EQ(w, 0.f) << to_string(isa);
    for (float c : r.ctx) EXPECT_EQ(c, 0.f) << to_string(isa);
  }
}

// A batch pads its sources at the end with keys nobody keeps (here NaN, which must not be read):
// each ISA gives the padded row the bits of the row alone, so a batch decodes a sentence as the
// sentence alone.
TEST(AttendRow, PaddingAtTheEndChangesNoBit) {
  at::manual_seed(13);
  for (int64_t d : {16, 64, 48, 100})
    for (int64_t n : {1, 3, 7, 15, 16, 21}) {
      const int64_t padded = n + 12;
      const auto q = at::randn({d});
      auto k = at::full({padded, d}, std::nanf("")), v = at::full({padded, d}, std::nanf(""));
      k.narrow(0, 0, n).copy_(at::randn({n, d}) * 3);
      v.narrow(0, 0, n).copy_(at::randn({n, d}));
      std::vector<char> keep(padded, 0);
      for (int64_t j = 0; j < n; ++j) keep[j] = 1;
      for (Isa isa : kernels::supported_isas()) {
        kernels::ScopedIsa scope(isa);
        SCOPED_TRACE(::testing::Message() << to_string(isa) << " d " << d << " n " << n);
        const auto alone = attend(q, k.narrow(0, 0, n).contiguous(), v.narrow(0, 0, n).contiguous(),
                                  reinterpret_cast<const bool*>(keep.data()), 0.3f);
        const auto batch = attend(q, k, v, reinterpret_cast<const bool*>(keep.data()), 0.3f);
        for (int64_t j = 0; j < n; ++j) EXPECT_EQ(batch.weights[j], alone.weights[j]) << j;
        for (int64_t j = n; j < padded; ++j) EXPECT_EQ(batch.weights[j], 0.f) << j;
        for (int64_t c = 0; c < d; ++c) EXPECT_EQ(batch.ctx[c], alone.ctx[c]) << c;
      }
    }
}

// Positions read through one pointer each (a beam's history: the rows its ancestors wrote, spread
// over the steps' buffers) give every ISA the bits of the same keys and values copied together.
TEST(AttendRow, GatheredPositionsGiveTheBitsOfTheRowsTogether) {
  at::manual_seed(14);
  for (int64_t d : {16, 64, 48})
    for (int64_t n : {1, 5, 16, 21}) {
      const auto q = at::randn({d}), pool_k = at::randn({3 * n, d}), pool_v = at::randn({3 * n, d});
      const auto rows = at::randperm(3 * n, at::kLong).narrow(0, 0, n);  // scattered in the pool
      const auto k = pool_k.index_select(0, rows), v = pool_v.index_select(0, rows);
      std::vector<const float*> keys(n), values(n);
      for (int64_t j = 0; j < n; ++j) {
        keys[j] = pool_k.data_ptr<float>() + rows[j].item<int64_t>() * d;
        values[j] = pool_v.data_ptr<float>() + rows[j].item<int64_t>() * d;
      }
      for (Isa isa : kernels::supported_isas()) {
        kernels::ScopedIsa scope(isa);
        SCOPED_TRACE(::testing::Message() << to_string(isa) << " d " << d << " n " << n);
        const auto together = attend(q, k, v, /*keep=*/nullptr, 0.3f);
        Result gathered{std::vector<float>(n, -1.f), std::vector<float>(d, -1.f)};
        kernels::attend_row(q.data_ptr<float>(), keys.data(), values.data(), n, d,
                            /*keep=*/nullptr, 0.3f, gathered.weights.data(), gathered.ctx.data());
        EXPECT_EQ(gathered.weights, together.weights);
        EXPECT_EQ(gathered.ctx, together.ctx);
      }
    }
}

}  // namespace
}  // namespace attnkit
