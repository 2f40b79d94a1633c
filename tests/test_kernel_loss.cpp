// The attention context and the label-smoothed loss (alone and fused with the output layer),
// each against its composite reference and finite differences.

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

// Tq = 2, and Tq = 1 as decoder steps have, whose value gradient is written without a zero fill.
TEST(ContextKernel, MatchesMatmulInValuesAndGradients) {
  for (int64_t tq : {2, 1}) {
    at::manual_seed(11);
    auto w = at::softmax(at::randn({4, tq, 7}), -1);
    w.index_put_({1, 0, at::indexing::Slice(3)}, 0);  // masked keys
    w.requires_grad_();
    auto v = at::randn({4, 7, 13}).requires_grad_();
    auto g = at::randn({4, tq, 13});
    auto expected = at::matmul(w, v);
    auto actual = kernels::attention_context(w, v);
    EXPECT_TRUE(close(actual, expected));
    auto eg = torch::autograd::grad({expected}, {w, v}, {g});
    auto ag = torch::autograd::grad({actual}, {w, v}, {g});
    EXPECT_TRUE(close(ag[0], eg[0]));
    EXPECT_TRUE(close(ag[1], eg[1]));
  }
}

TEST(ContextKernel, GradientsMatchFiniteDifferences) {
  at::manual_seed(12);
  auto w = at::rand({2, 1, 5}, at::kDouble).requires_grad_();
  auto v = at::randn({2, 5, 3}, at::kDouble).requires_grad_();
  auto none = at::zeros({1}, at::kDouble);
  EXPECT_TRUE(gradcheck(
      [&] { return testing::projection_loss(kernels::attention_context(w, v), none, 1); }, {w, v}));
}

TEST(LossKernel, SequenceLossMatchesTheCompositeReference) {
  at::manual_seed(13);
  // V = 77 runs every width of the vector loops (32, 8 and the scalar tail); 11 mostly the tail.
  for (int64_t V : {11, 77})
    for (double eps : {0.0, 0.1}) {
      const int64_t B = 3, T = 4;
      auto target = at::randint(1, V, {B, T}, at::kLong);
      target.index_put_({0, at::indexing::Slice(2)}, 0);  // padding
      auto logits = (at::randn({B, T, V}) * 3).requires_grad_();
      auto expected = train::sequence_loss(logits, target, eps, /*fused=*/false);
      auto actual = train::sequence_loss(logits, target, eps, /*fused=*/true);
      EXPECT_TRUE(close(actual, expected)) << "eps " << eps;
      auto eg = torch::autograd::grad({expected}, {logits});
      auto ag = torch::autograd::grad({actual}, {logits});
      EXPECT_TRUE(close(ag[0], eg[0], 1e-6, 1e-5)) << "eps " << eps;
      // Padding positions get no gradient at all.
      EXPECT_EQ(ag[0][0][3].abs().max().item<float>(), 0.f);
    }
}

TEST(LossKernel, GradientsMatchFiniteDifferences) {
  at::manual_seed(14);
  auto logits = at::randn({5, 6}, at::kDouble).requires_grad_();
  auto target = at::tensor({1, 0, 5, 2, 3}, at::kLong);
  auto none = at::zeros({1}, at::kDouble);
  EXPECT_TRUE(gradcheck(
      [&] {
        return testing::projection_loss(
            kernels::label_smoothed_cross_entropy(logits, target, 0.2, 0), none, 2);
      },
      {logits}));
}

TEST(LossKernel, LargeLogitsStayFinite) {
  auto logits = at::tensor({1e4f, -1e4f, 0.f, -88.f, 88.f, 50.f}).view({2, 3}).requires_grad_();
  auto loss = kernels::label_smoothed_cross_entropy(logits, at::tensor({1, 0}, at::kLong), 0.1, -1);
  loss.sum().backward();
  EXPECT_TRUE(at::isfinite(loss).all().item<bool>());
  EXPECT_TRUE(at::isfinite(logits.grad()).all().item<bool>());
  EXPECT_NEAR(loss[0].item<float>(), 0.9 * 2e4 + 0.1 * (1e4 - 0), 1.0);
}

// The output layer fused with the loss against the layer followed by the loss: per-token values
// and the gradients of x, of a weight that is a column block of a wider one, and of the bias,
// with ignored rows, for a mean (one upstream gradient for every row, GEMM's alpha) and for
// different upstream gradients per row.
TEST(LossKernel, LinearCrossEntropyMatchesTheLayerThenTheLoss) {
  at::manual_seed(17);
  const int64_t N = 37, K = 20, V = 53;  // V off the vector width
  auto target = at::randint(1, V, {N}, at::kLong);
  target.index_put_({at::indexing::Slice(0, N, 5)}, 0);  // every fifth row ignored
  for (double eps : {0.0, 0.1})
    for (bool mean : {true, false}) {
      SCOPED_TRACE("eps " + std::to_string(eps) + (mean ? ", mean" : ", weighted rows"));
      auto x = at::randn({N, K}).requires_grad_();
      auto wide = (at::randn({V, K + 3}) * 0.3).requires_grad_();
      auto bias = at::randn({V}).requires_grad_();
      const auto upstream = mean ? at::full({N}, 1.0 / N) : at::rand({N});
      auto fused = kernels::linear_cross_entropy(x, wide.narrow(1, 3, K), bias, target, eps, 0);
      auto reference = kernels::label_smoothed_cross_entropy(
          at::linear(x, wide.narrow(1, 3, K), bias), target, eps, 0);
      EXPECT_TRUE(close(fused, reference, 1e-5, 1e-5));
      auto ga = torch::autograd::grad({(fused * upstream).sum()}, {x, wide, bias});
      auto ge = torch::autograd::grad({(reference * upstream).sum()}, {x, wide, bias});
      for (size_t i = 0; i < ga.size(); ++i) EXPECT_TRUE(close(ga[i], ge[i], 1e-6, 1e-4)) << i;
    }
}

// Rows split between threads for the softmax passes, columns for the bias gradient, elements
// for Adam: the same bits on one thread and two, and still the layer then the loss.
TEST(LossKernel, LinearCrossEntropyAndAdamAreTheSameOnAnyThreads) {
  at::manual_seed(29);
  const int64_t N = 67, K = 40, V = 4099;  // 2^18 logits and 2^17 weights: two parts each
  auto target = at::randint(1, V, {N}, at::kLong);
  target.index_put_({at::indexing::Slice(0, N, 7)}, 0);
  const auto x = at::randn({N, K}), w = at::randn({V, K}) * 0.3, b = at::randn({V});
  auto run = [&](int threads) {
    set_threads(threads, ThreadPolicy::Kernels);
    auto xr = x.clone().requires_grad_(), wr = w.clone().requires_grad_();
    auto br = b.clone().requires_grad_();
    const auto loss = kernels::linear_cross_entropy(xr, wr, br, target, 0.1, 0);
    auto grads = torch::autograd::grad({loss.mean()}, {xr, wr, br});
    grads.push_back(loss);
    // One Adam update of w from its gradient.
    auto p = w.clone(), m = at::zeros_like(w), v = at::zeros_like(w);
    kernels::adam_update(p.data_ptr<float>(), grads[1].data_ptr<float>(), m.data_ptr<float>(),
                         v.data_ptr<float>(), p.numel(), {0.9f, 0.98f, 1e-9f, 1e-3f, 0.1f});
    grads.insert(grads.end(), {p, m, v});
    return grads;
  };
  const auto one = run(1), two = run(2);
  set_threads(1);
  for (size_t i = 0; i < one.size(); ++i) EXPECT_TRUE(at::equal(one[i], two[i])) << i;
  const auto reference = kernels::label_smoothed_cross_entropy(at::linear(x, w, b), target, 0.1, 0);
  EXPECT_TRUE(close(two[3], reference, 1e-5, 1e-5));
}

TEST(LossKernel, RejectsTargetsOutsideTheVocabulary) {
  EXPECT_THROW(kernels::label_smoothed_cross_entropy(at::zeros({2, 3}),
                                                     at::tensor({1, 3}, at::kLong), 0.1, 0),
               c10::Error);
}

}  // namespace
}  // namespace attnkit
