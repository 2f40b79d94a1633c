// Layer normalisation and the masked softmax, against ATen and finite differences.

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

// Layer normalisation on the kernels' threads against at::layer_norm: values and every gradient
// in float (D = 77 runs the vector loops and their tails), finite differences in double, and the
// same bits on one thread and two.
TEST(LayerNormKernel, MatchesAtLayerNormAndFiniteDifferences) {
  at::manual_seed(43);
  for (int64_t D : {77, 256}) {
    SCOPED_TRACE("D " + std::to_string(D));
    const auto x = at::randn({37, 3, D}) * 3 + 1, w = at::randn({D}), b = at::randn({D});
    const auto upstream = at::randn({37, 3, D});
    auto run = [&](bool fused) {
      auto xr = x.clone().requires_grad_(), wr = w.clone().requires_grad_();
      auto br = b.clone().requires_grad_();
      auto y =
          fused ? kernels::layer_norm(xr, wr, br, 1e-5) : at::layer_norm(xr, {D}, wr, br, 1e-5);
      auto grads = torch::autograd::grad({y}, {xr, wr, br}, {upstream});
      grads.insert(grads.begin(), y);
      return grads;
    };
    const auto fused = run(true), reference = run(false);
    for (size_t i = 0; i < fused.size(); ++i)
      EXPECT_TRUE(close(fused[i], reference[i], 1e-4, 1e-4)) << "output " << i;
    {
      at::NoGradGuard no_grad;  // the forward alone, as decoding runs it
      EXPECT_TRUE(at::equal(kernels::layer_norm(x, w, b, 1e-5), fused[0]));
    }
  }
  auto xd = (at::randn({5, 9}, at::kDouble) * 2).requires_grad_();
  auto wd = at::randn({9}, at::kDouble).requires_grad_(), bd = at::randn({9}, at::kDouble);
  bd.requires_grad_();
  const auto none = at::zeros({1}, at::kDouble);
  EXPECT_TRUE(gradcheck(
      [&] { return testing::projection_loss(kernels::layer_norm(xd, wd, bd, 1e-5), none, 2); },
      {xd, wd, bd}));
}

// The residual stream at a pre-norm sublayer: {x, norm(x)} as one node against x and
// kernels::layer_norm(x) used apart, where LibTorch's engine adds x's two gradients. The same
// values, and gradients to float rounding (the one add moves into the norm's row pass), for x
// [B, T, D] as the encoder has it and [R, D] as the decoder's real rows; with the stream's
// gradient alone (the sublayer unused) x's gradient is the stream's.
TEST(LayerNormKernel, BranchEqualsTheStreamAndTheNormUsedApart) {
  at::manual_seed(44);
  for (auto shape : {std::vector<int64_t>{5, 7, 256}, std::vector<int64_t>{37, 77}}) {
    const int64_t D = shape.back();
    SCOPED_TRACE("D " + std::to_string(D));
    const auto x = at::randn(shape) * 3 + 1, w = at::randn({D}), b = at::randn({D});
    const auto g_stream = at::randn(shape), g_norm = at::randn(shape);
    auto run = [&](bool branch) {
      auto xr = x.clone().requires_grad_(), wr = w.clone().requires_grad_();
      auto br = b.clone().requires_grad_();
      auto [stream, y] = branch ? kernels::layer_norm_branch(xr, wr, br, 1e-5)
                                : std::pair{xr, kernels::layer_norm(xr, wr, br, 1e-5)};
      auto grads = torch::autograd::grad({stream * 2, y}, {xr, wr, br}, {g_stream, g_norm});
      grads.push_back(stream);
      grads.push_back(y);
      return grads;
    };
    const auto branch = run(true), apart = run(false);
    for (size_t i = 0; i < branch.size(); ++i)
      EXPECT_TRUE(close(branch[i], apart[i], 1e-6, 1e-6)) << "output " << i;
    EXPECT_TRUE(at::equal(branch[3], x));
    EXPECT_TRUE(at::equal(branch[4], apart[4]));
    auto xr = x.clone().requires_grad_();
    auto [stream, y] = kernels::layer_norm_branch(xr, w.clone().requires_grad_(), b, 1e-5);
    EXPECT_TRUE(at::equal(torch::autograd::grad({stream}, {xr}, {g_stream})[0], g_stream));
  }
  // Without gradients: x itself and the plain norm.
  const auto x = at::randn({3, 16}), w = at::randn({16}), b = at::randn({16});
  const auto [stream, y] = kernels::layer_norm_branch(x, w, b, 1e-5);
  EXPECT_TRUE(stream.is_same(x));
  EXPECT_TRUE(at::equal(y, kernels::layer_norm(x, w, b, 1e-5)));
}

TEST(LayerNormKernel, TheSameOnAnyThreads) {
  at::manual_seed(47);
  const auto x = at::randn({700, 256}), w = at::randn({256}), b = at::randn({256});
  const auto upstream = at::randn({700, 256});
  auto run = [&](int threads) {
    set_threads(threads, ThreadPolicy::Kernels);
    auto xr = x.clone().requires_grad_(), wr = w.clone().requires_grad_();
    auto br = b.clone().requires_grad_();
    auto y = kernels::layer_norm(xr, wr, br, 1e-5);
    auto grads = torch::autograd::grad({y}, {xr, wr, br}, {upstream});
    grads.push_back(y);
    return grads;
  };
  const auto one = run(1), two = run(2);
  set_threads(1);
  for (size_t i = 0; i < one.size(); ++i) EXPECT_TRUE(at::equal(one[i], two[i])) << i;
}

// The fused masked softmax against the composite (functional::soft_weights): values and
// gradients with a padding mask, a row with nothing to attend to, no mask at all, and finite
// differences in double.
TEST(MaskedSoftmaxKernel, MatchesTheCompositeAndFiniteDifferences) {
  at::manual_seed(15);
  auto keep = at::ones({3, 1, 7}, at::kBool);
  keep.index_put_({0, 0, at::indexing::Slice(4)}, false);  // padding
  keep.index_put_({2}, false);                             // nothing to attend to
  for (const auto& mask : {keep, at::Tensor()}) {
    auto x = (at::randn({3, 2, 7}) * 3).requires_grad_();
    auto g = at::randn({3, 2, 7});
    auto expected = functional::soft_weights(x, mask);
    auto actual = kernels::masked_softmax(x, mask);
    EXPECT_TRUE(close(actual, expected));
    auto eg = torch::autograd::grad({expected}, {x}, {g});
    auto ag = torch::autograd::grad({actual}, {x}, {g});
    EXPECT_TRUE(close(ag[0], eg[0]));
    if (mask.defined()) {
      EXPECT_EQ(actual[2].abs().sum().item<float>(), 0.f) << "a fully masked row is all zeros";
      EXPECT_EQ(ag[0][0].narrow(1, 4, 3).abs().sum().item<float>(), 0.f) << "masked: no gradient";
      EXPECT_TRUE(close(actual[1].sum(-1), at::ones({2})));
    }
  }
  auto xd = at::randn({3, 2, 7}, at::kDouble).requires_grad_();
  auto weights = at::zeros({1}, at::kDouble);
  EXPECT_TRUE(gradcheck(
      [&] { return testing::projection_loss(kernels::masked_softmax(xd, keep), weights, 3); },
      {xd}));
}

}  // namespace
}  // namespace attnkit
