// Dropout, alone and fused with ReLU or a residual add: the share kept, its scale, the seed
// and the threads.

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/nn/utils/clip_grad.h>
#include <torch/optim/adam.h>

#include <array>

#include "attnkit/attention/functional.h"
#include "attnkit/core/info.h"
#include "attnkit/kernels/cpu/cpu_isa.h"
#include "attnkit/kernels/ops/adam.h"
#include "attnkit/kernels/ops/column_split.h"
#include "attnkit/kernels/ops/context.h"
#include "attnkit/kernels/ops/dropout.h"
#include "attnkit/kernels/ops/embedding.h"
#include "attnkit/kernels/ops/grad_norm.h"
#include "attnkit/kernels/ops/layer_norm.h"
#include "attnkit/kernels/ops/linear.h"
#include "attnkit/kernels/ops/loss.h"
#include "attnkit/kernels/ops/masked_softmax.h"
#include "attnkit/kernels/ops/ragged.h"
#include "attnkit/train/step.h"
#include "kernels/gemm/products.h"
#include "testing.h"

namespace attnkit {
namespace {

using testing::close;
using testing::gradcheck;

TEST(DropoutKernel, KeepsTheRightShareScaledAndIsReproducibleFromTheSeed) {
  auto x = at::rand({1000, 1001}) + 0.5;  // no zeros, so a zero output means dropped
  for (double p : {0.1, 0.5}) {
    at::manual_seed(16);
    auto y = kernels::dropout(x, p, /*training=*/true);
    auto kept = y != 0;
    const double share = kept.to(at::kDouble).mean().item<double>();
    EXPECT_NEAR(share, 1 - p, 0.002) << "p " << p;  // about 4 sigma over 1e6 draws
    EXPECT_TRUE(close(y.masked_select(kept), x.masked_select(kept) / (1 - p), 1e-6, 1e-6));
    // Neighbouring elements are independent: P(both kept) = (1 - p)^2.
    auto pairs = kept.view({-1, 2}).all(1).to(at::kDouble).mean().item<double>();
    EXPECT_NEAR(pairs, (1 - p) * (1 - p), 0.003);
    at::manual_seed(16);
    EXPECT_TRUE(at::equal(kernels::dropout(x, p, true), y));
    EXPECT_FALSE(at::equal(kernels::dropout(x, p, true), y));  // the stream moved on
    // float32 draws eight at a time (AVX2), float64 one at a time: the same seed, the same mask.
    at::manual_seed(16);
    EXPECT_TRUE(at::equal(kernels::dropout(x.to(at::kDouble), p, true) != 0, kept));
  }
}

TEST(DropoutKernel, BackwardUsesTheForwardMask) {
  auto x = (at::rand({7, 33}, at::kDouble) + 0.5).requires_grad_();
  auto g = at::randn({7, 33}, at::kDouble);
  auto y = kernels::dropout(x, 0.3, true);
  auto dx = torch::autograd::grad({y}, {x}, {g})[0];
  EXPECT_TRUE(close(dx, g * y.detach() / x.detach(), 1e-12, 1e-12));
}

TEST(DropoutKernel, IdentityWhenNotTrainingAndZerosAtOne) {
  auto x = at::randn({4, 5});
  EXPECT_TRUE(kernels::dropout(x, 0.5, false).is_same(x));
  EXPECT_TRUE(kernels::dropout(x, 0.0, true).is_same(x));
  auto zeros = kernels::dropout(x, 1.0, true);
  EXPECT_EQ(zeros.abs().max().item<float>(), 0.f);
  EXPECT_THROW(kernels::dropout(x, 1.5, true), c10::Error);
}

// ReLU + dropout in one pass against the two ops it replaces, from the same seed: the same
// values and gradients bit for bit (a kept element is x / (1 - p) either way, and its gradient
// g / (1 - p)), in float (vector paths) and double (the scalar loop).
TEST(ReluDropoutKernel, EqualsReluThenDropoutInValuesAndGradients) {
  for (auto dtype : {at::kFloat, at::kDouble})
    for (double p : {0.0, 0.1, 0.5}) {
      at::manual_seed(21);
      auto x = at::randn({37, 129}, dtype);             // odd sizes: every vector loop has a tail
      x.index_put_({0, at::indexing::Slice(0, 5)}, 0);  // exact zeros: no gradient, as at::relu
      const auto xa = x.clone().requires_grad_(), xb = x.clone().requires_grad_();
      const auto g = at::randn({37, 129}, dtype);
      at::manual_seed(22);
      const auto fused = kernels::relu_dropout(xa, p, /*training=*/true);
      at::manual_seed(22);
      const auto composite = kernels::dropout(at::relu(xb), p, /*training=*/true);
      EXPECT_TRUE(at::equal(fused, composite)) << "p " << p;
      const auto ga = torch::autograd::grad({fused}, {xa}, {g})[0];
      const auto gb = torch::autograd::grad({composite}, {xb}, {g})[0];
      EXPECT_TRUE(at::equal(ga, gb)) << "p " << p;
      if (p > 0) {  // the mask really drops: about p of the positive elements
        const double dropped =
            ((fused == 0) & (x > 0)).sum().item<double>() / (x > 0).sum().item<double>();
        EXPECT_NEAR(dropped, p, 0.05) << "p " << p;
      }
    }
  // Not training: ReLU alone.
  auto x = at::randn({4, 5});
  EXPECT_TRUE(at::equal(kernels::relu_dropout(x, 0.5, /*training=*/false), at::relu(x)));
  EXPECT_THROW(kernels::relu_dropout(x, 1.5, true), c10::Error);
}

// A sublayer's output joining the residual stream, x + dropout(y), in one pass against the two
// ops it replaces from the same seed: the same values and gradients bit for bit (a kept element
// is x + y / (1 - p) either way), on every ISA the CPU runs (float) and in double (the scalar
// loop), with and without dropout; and the stream moves on by one seed, as the composite's.
TEST(AddDropoutKernel, EqualsXPlusDropoutInValuesAndGradientsOnEveryIsa) {
  for (kernels::Isa isa : kernels::supported_isas()) {
    kernels::ScopedIsa scope(isa);
    for (auto dtype : {at::kFloat, at::kDouble})
      for (double p : {0.0, 0.1, 0.5}) {
        SCOPED_TRACE(std::string(kernels::to_string(isa)) + " p " + std::to_string(p) +
                     (dtype == at::kFloat ? " float" : " double"));
        at::manual_seed(24);
        const auto x = at::randn({37, 129}, dtype), y = at::randn({37, 129}, dtype);
        const auto g = at::randn({37, 129}, dtype);
        auto run = [&](bool fused) {
          const auto xr = x.clone().requires_grad_(), yr = y.clone().requires_grad_();
          at::manual_seed(25);
          const auto out = fused ? kernels::add_dropout(xr, yr, p, /*training=*/true)
                                 : xr + kernels::dropout(yr, p, /*training=*/true);
          auto grads = torch::autograd::grad({out}, {xr, yr}, {g});
          grads.push_back(out);
          grads.push_back(at::randint(1 << 30, {1}));  // where the random stream stands after
          return grads;
        };
        const auto fused = run(true), composite = run(false);
        for (size_t i = 0; i < fused.size(); ++i)
          EXPECT_TRUE(at::equal(fused[i], composite[i])) << i;
        if (p > 0) {  // the mask really drops: about p of y's elements reach the output as 0
          const double dropped = (fused[1] == 0).to(at::kDouble).mean().item<double>();
          EXPECT_NEAR(dropped, p, 0.05);
        }
      }
  }
  // Not training: the plain sum; and the checks of kernels::dropout.
  const auto x = at::randn({4, 5}), y = at::randn({4, 5});
  EXPECT_TRUE(at::equal(kernels::add_dropout(x, y, 0.5, /*training=*/false), x + y));
  EXPECT_THROW(kernels::add_dropout(x, y, 1.5, true), c10::Error);
}

// A tensor large enough to be split between threads gets the mask one thread draws: each
// element's draw depends on its index only.
TEST(DropoutKernel, ThreadsChangeNoMask) {
  auto x = at::randn({3, 100003});  // parts of ~2^16 elements, and a tail
  const auto g = at::randn({3, 100003});
  auto run = [&](int threads) {
    set_threads(threads, ThreadPolicy::Kernels);
    at::manual_seed(23);
    const auto xr = x.clone().requires_grad_();
    const auto a = kernels::dropout(xr, 0.3, true), b = kernels::relu_dropout(xr, 0.3, true);
    const auto grads = torch::autograd::grad({a, b}, {xr}, {g, g});
    return std::vector<at::Tensor>{a, b, grads[0]};
  };
  const auto one = run(1), two = run(2);
  set_threads(1);
  for (size_t i = 0; i < one.size(); ++i) EXPECT_TRUE(at::equal(one[i], two[i])) << i;
}

}  // namespace
}  // namespace attnkit
