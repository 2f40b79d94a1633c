// The fused kernels of a training step besides the GRU: the attention context and the
// label-smoothed loss, each against its composite reference and finite differences; and
// gradient clipping against torch::nn::utils::clip_grad_norm_. Also the few-row inference
// product against at::linear, and the fused Adam against torch::optim::Adam; padded batches to
// their real rows and back.

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

TEST(ClipGradNorm, MatchesTorchClipGradNorm) {
  at::manual_seed(15);
  for (double max_norm : {0.5, 100.0}) {
    std::vector<at::Tensor> a, b;
    // The last spans three of sum_of_squares's blocks, the last one partly.
    for (auto shape :
         {std::vector<int64_t>{3, 4}, std::vector<int64_t>{7}, std::vector<int64_t>{301, 70}}) {
      auto g = at::randn(shape);
      a.push_back(at::zeros(shape).requires_grad_());
      b.push_back(at::zeros(shape).requires_grad_());
      a.back().mutable_grad() = g.clone();
      b.back().mutable_grad() = g.clone();
    }
    const double expected = torch::nn::utils::clip_grad_norm_(b, max_norm);
    const double actual = train::clip_grad_norm(a, max_norm);
    EXPECT_NEAR(actual, expected, 1e-5 * expected);
    for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(close(a[i].grad(), b[i].grad(), 1e-6, 1e-6));
  }
}

// The parallel passes of a step (bias gradients, clipping, Adam over every parameter at once):
// the same bits on one thread and two, and the same as their one-thread loops. The column sums
// on every ISA (blocks of 64 and 8 columns in registers, then single columns: 525 = 8 x 64 +
// 8 + 5 takes each kind).
TEST(StepKernel, ColumnSumsAreRowOrderSumsOnAnyThreads) {
  at::manual_seed(31);
  const auto d = at::randn({300, 525});  // 157,500 elements: two parts
  auto in_order = at::zeros({525});      // each column summed row by row, in float
  for (int64_t i = 0; i < 300; ++i) in_order += d[i];
  at::Tensor two;
  for (kernels::Isa isa : kernels::supported_isas()) {
    kernels::ScopedIsa scope(isa);
    auto sums = [&](int threads) {
      set_threads(threads, ThreadPolicy::Kernels);
      return kernels::products::column_sums(d);
    };
    const auto one = sums(1);
    two = sums(2);
    set_threads(1);
    EXPECT_TRUE(at::equal(one, two)) << to_string(isa);
    EXPECT_TRUE(at::equal(two, in_order)) << to_string(isa);
  }
  EXPECT_TRUE(close(two, d.to(at::kDouble).sum(0).to(at::kFloat), 1e-4, 1e-5));
  EXPECT_TRUE(at::equal(kernels::products::column_sums(d.to(at::kDouble)),
                        d.to(at::kDouble).sum(0)));  // the reference for anything but float
}

TEST(StepKernel, GradientNormAndAdamAreTheSameOnAnyThreads) {
  at::manual_seed(37);
  const std::vector<int64_t> sizes{5, 0, 70001, 3, 131073};
  std::vector<at::Tensor> grads;
  for (int64_t n : sizes) grads.push_back(at::randn({n}));
  const kernels::AdamUpdate u{0.9f, 0.98f, 1e-9f, 1e-3f, 0.1f};
  struct Result {
    double squares;
    std::vector<at::Tensor> scaled, p, m, v;
  };
  auto run = [&](int threads) {
    set_threads(threads, ThreadPolicy::Kernels);
    Result r;
    std::vector<kernels::FloatSpan> spans;
    std::vector<kernels::AdamTensor> update;
    for (const auto& g : grads) {
      r.scaled.push_back(g.clone());
      spans.push_back({r.scaled.back().data_ptr<float>(), g.numel()});
      r.p.push_back(at::randn({g.numel()}, at::TensorOptions().dtype(at::kFloat)));
      r.m.push_back(at::zeros_like(g));
      r.v.push_back(at::zeros_like(g));
      update.push_back({r.p.back().data_ptr<float>(), g.data_ptr<float>(),
                        r.m.back().data_ptr<float>(), r.v.back().data_ptr<float>(), g.numel(), u});
    }
    r.squares = kernels::sum_of_squares(spans);
    kernels::scale(spans, 0.25f);
    kernels::adam_update(update);
    return r;
  };
  at::manual_seed(41);
  const Result one = run(1);
  at::manual_seed(41);
  const Result two = run(2);
  set_threads(1);
  EXPECT_EQ(one.squares, two.squares);
  double expected = 0;
  for (const auto& g : grads) expected += g.to(at::kDouble).pow(2).sum().item<double>();
  EXPECT_NEAR(two.squares, expected, 1e-12 * expected);
  at::manual_seed(41);
  for (size_t t = 0; t < sizes.size(); ++t) {
    SCOPED_TRACE("tensor " + std::to_string(t));
    EXPECT_TRUE(at::equal(one.scaled[t], two.scaled[t]));
    EXPECT_TRUE(at::equal(two.scaled[t], grads[t] * 0.25f));
    for (auto x : {&Result::p, &Result::m, &Result::v})
      EXPECT_TRUE(at::equal((one.*x)[t], (two.*x)[t]));
    // One tensor's update alone, as the per-parameter call makes it.
    auto p = at::randn({sizes[t]}), m = at::zeros({sizes[t]}), v = at::zeros({sizes[t]});
    kernels::adam_update(p.data_ptr<float>(), grads[t].data_ptr<float>(), m.data_ptr<float>(),
                         v.data_ptr<float>(), sizes[t], u);
    EXPECT_TRUE(at::equal(p, two.p[t]));
    EXPECT_TRUE(at::equal(v, two.v[t]));
  }
}

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

// A cross-attention's two projections through one weight's row blocks, as one node, against
// kernels::linear on each block (narrows of the weight, whose gradients LibTorch's engine
// assembles): the same products, so the same values and every gradient bit for bit, with and
// without bias, 3-D and 2-D inputs; an unused output's blocks of the gradients are zero.
TEST(LinearKernel, BlocksEqualLinearOnEachBlockInValuesAndGradients) {
  at::manual_seed(13);
  for (bool with_bias : {true, false}) {
    SCOPED_TRACE(with_bias ? "bias" : "no bias");
    const auto x1 = at::randn({3, 5, 32}), x2 = at::randn({41, 32});
    const auto w = at::randn({96, 32}), b = with_bias ? at::randn({96}) : at::Tensor();
    const auto g1 = at::randn({3, 5, 32}), g2 = at::randn({41, 64});
    auto run = [&](bool blocks) {
      const auto a = x1.clone().requires_grad_(), c = x2.clone().requires_grad_(),
                 wr = w.clone().requires_grad_();
      const auto br = with_bias ? b.clone().requires_grad_() : at::Tensor();
      auto [y1, y2] = blocks ? kernels::linear_blocks(a, c, wr, br, 32)
                             : std::pair{kernels::linear(a, wr.narrow(0, 0, 32),
                                                         with_bias ? br.narrow(0, 0, 32) : br),
                                         kernels::linear(c, wr.narrow(0, 32, 64),
                                                         with_bias ? br.narrow(0, 32, 64) : br)};
      std::vector<at::Tensor> inputs{a, c, wr};
      if (with_bias) inputs.push_back(br);
      auto grads = torch::autograd::grad({y1, y2}, inputs, {g1, g2});
      grads.push_back(y1);
      grads.push_back(y2);
      return grads;
    };
    const auto blocks = run(true), apart = run(false);
    ASSERT_EQ(blocks.size(), apart.size());
    for (size_t i = 0; i < blocks.size(); ++i) EXPECT_TRUE(at::equal(blocks[i], apart[i])) << i;
    EXPECT_TRUE(close(blocks.back(),
                      at::linear(x2, w.narrow(0, 32, 64), with_bias ? b.narrow(0, 32, 64) : b)));
  }
  // The queries unused: the keys' and values' gradient blocks, zeros in the queries' rows.
  const auto x1 = at::randn({4, 16}), x2 = at::randn({6, 16});
  const auto w = at::randn({48, 16}).requires_grad_(), b = at::randn({48}).requires_grad_();
  const auto g2 = at::randn({6, 32});
  auto [y1, y2] = kernels::linear_blocks(x1, x2, w, b, 16);
  const auto grads = torch::autograd::grad({y2}, {w, b}, {g2});
  EXPECT_EQ(grads[0].narrow(0, 0, 16).abs().max().item<float>(), 0.f);
  EXPECT_EQ(grads[1].narrow(0, 0, 16).abs().max().item<float>(), 0.f);
  EXPECT_TRUE(close(grads[0].narrow(0, 16, 32), at::matmul(g2.t(), x2)));
  EXPECT_TRUE(close(grads[1].narrow(0, 16, 32), g2.sum(0)));
}

// Every row count either side of the GEMV/GEMM switch, a strided weight (a narrow of a wider
// one, as the score's key half is), 3-D input, with and without bias; and under autograd the
// reference path, gradients included.
TEST(LinearKernel, MatchesAtLinearForFewAndManyRows) {
  at::manual_seed(12);
  const auto wide = at::randn({24, 40});
  const auto weight = wide.narrow(1, 9, 31);  // [24, 31], rows 40 apart
  const auto bias = at::randn({24});
  for (int64_t rows = 1; rows <= 10; ++rows) {
    SCOPED_TRACE(std::to_string(rows) + " rows");
    const auto x = at::randn({rows, 31});
    {
      at::NoGradGuard no_grad;
      EXPECT_TRUE(close(kernels::linear(x, weight, bias), at::linear(x, weight, bias)));
      EXPECT_TRUE(close(kernels::linear(x, weight, {}), at::matmul(x, weight.t())));
    }
    c10::InferenceMode inference;
    const auto x3 = x.reshape({1, rows, 31});
    const auto y = kernels::linear(x3, weight, bias);
    EXPECT_EQ(y.sizes(), (at::IntArrayRef{1, rows, 24}));
    EXPECT_TRUE(close(y, at::linear(x3, weight, bias)));
  }
}

// With autograd: values and the gradients of x, of a weight that is a column block of a wider
// one (as the decoder's share of W_ih is) and of the bias, against at::linear; and gradients
// only for what asks for them.
TEST(LinearKernel, GradientsMatchAtLinear) {
  at::manual_seed(13);
  for (int64_t rows : {3, 40}) {
    SCOPED_TRACE(std::to_string(rows) + " rows");
    auto wide = at::randn({24, 40}).requires_grad_();
    auto bias = at::randn({24}).requires_grad_();
    auto x = at::randn({2, rows, 31}).requires_grad_();
    auto g = at::randn({2, rows, 24});
    auto actual = kernels::linear(x, wide.narrow(1, 9, 31), bias);
    auto expected = at::linear(x, wide.narrow(1, 9, 31), bias);
    EXPECT_TRUE(close(actual, expected));
    auto ga = torch::autograd::grad({actual}, {x, wide, bias}, {g});
    auto ge = torch::autograd::grad({expected}, {x, wide, bias}, {g});
    for (size_t i = 0; i < ga.size(); ++i) EXPECT_TRUE(close(ga[i], ge[i], 1e-5, 1e-4)) << i;
    EXPECT_TRUE(close(ga[1].narrow(1, 0, 9), at::zeros({24, 9}), 0, 0));
  }
  auto x = at::randn({9, 31});  // constant input: only the weight's gradient
  auto w = at::randn({24, 31}).requires_grad_();
  auto y = kernels::linear(x, w, {});
  auto gw = torch::autograd::grad({y.sum()}, {w})[0];
  EXPECT_TRUE(close(gw, at::ones({24, 9}).mm(x)));
}

// The training products (products.h: the forward pass's columns, each piece's thread packing its
// own panels; the backward pass's dx, dw and db in one hand-off, rows claimed in pieces) on one to
// three threads: the same bits, on every ISA, for weights read where they lie and packed (rows 4
// KiB apart), columns off the panel width, rows off the 8-row block and more than a piece's 96;
// and close to at::linear.
TEST(LinearKernel, ValuesAndGradientsAreTheSameOnAnyThreads) {
  at::manual_seed(21);
  for (kernels::Isa isa : kernels::supported_isas())
    for (auto [rows, in, out] :
         std::vector<std::array<int64_t, 3>>{{37, 64, 100}, {50, 1024, 72}, {250, 96, 130}}) {
      SCOPED_TRACE(::testing::Message()
                   << to_string(isa) << " " << rows << " x " << in << " x " << out);
      kernels::ScopedIsa scope(isa);
      const auto x0 = at::randn({rows, in}), w0 = at::randn({out, in}) * 0.1, b0 = at::randn({out}),
                 g = at::randn({rows, out});
      std::vector<at::Tensor> first;
      for (int threads : {1, 2, 3}) {
        set_threads(threads, ThreadPolicy::Kernels);
        auto x = x0.clone().requires_grad_(), w = w0.clone().requires_grad_(),
             b = b0.clone().requires_grad_();
        const auto y = kernels::linear(x, w, b);
        auto got = torch::autograd::grad({y}, {x, w, b}, {g});
        got.insert(got.begin(), y.detach());
        if (first.empty()) first = got;
        for (size_t i = 0; i < got.size(); ++i)
          EXPECT_TRUE(at::equal(got[i], first[i])) << threads << " threads, output " << i;
      }
      set_threads(1);
      auto x = x0.clone().requires_grad_(), w = w0.clone().requires_grad_(),
           b = b0.clone().requires_grad_();
      const auto y = at::linear(x, w, b);
      auto expected = torch::autograd::grad({y}, {x, w, b}, {g});
      expected.insert(expected.begin(), y.detach());
      for (size_t i = 0; i < expected.size(); ++i)
        EXPECT_TRUE(close(first[i], expected[i], 1e-4, 1e-4)) << "output " << i;
    }
}

// The fused Adam against torch::optim::Adam: the same parameters after several steps (with a
// parameter that gets no gradient in one of them, and sizes off the vector width), the same
// state, and the two can take turns on one optimizer, as a resumed checkpoint would.
TEST(AdamKernel, MatchesTorchAdam) {
  at::manual_seed(13);
  auto make = [] {
    return std::vector<at::Tensor>{at::randn({37, 5}).requires_grad_(),
                                   at::randn({3}).requires_grad_(),
                                   at::randn({64, 16}).requires_grad_()};
  };
  auto reference = make(), fused = make();
  for (size_t i = 0; i < reference.size(); ++i) {
    at::NoGradGuard no_grad;
    fused[i].copy_(reference[i]);
  }
  const auto options = torch::optim::AdamOptions(3e-3).betas({0.8, 0.95}).eps(1e-6);
  torch::optim::Adam ref_opt(reference, options), fused_opt(fused, options);
  for (int step = 0; step < 6; ++step) {
    for (size_t i = 0; i < reference.size(); ++i) {
      if (step == 2 && i == 1) {  // no gradient this step: Adam leaves it alone
        reference[i].mutable_grad() = at::Tensor();
        fused[i].mutable_grad() = at::Tensor();
        continue;
      }
      auto g = at::randn(reference[i].sizes());
      reference[i].mutable_grad() = g.clone();
      fused[i].mutable_grad() = g.clone();
    }
    ref_opt.step();
    if (step == 4)
      fused_opt.step();  // the reference on the fused optimizer's state
    else
      train::adam_step(fused_opt);
    for (size_t i = 0; i < reference.size(); ++i)
      EXPECT_TRUE(close(fused[i], reference[i], 1e-6, 1e-5)) << "step " << step << ", param " << i;
  }
  for (size_t i = 0; i < reference.size(); ++i) {
    const auto key = [](const at::Tensor& p) {
      return c10::guts::to_string(p.unsafeGetTensorImpl());
    };
    auto& r = static_cast<torch::optim::AdamParamState&>(*ref_opt.state().at(key(reference[i])));
    auto& f = static_cast<torch::optim::AdamParamState&>(*fused_opt.state().at(key(fused[i])));
    EXPECT_EQ(f.step(), r.step());
    EXPECT_TRUE(close(f.exp_avg(), r.exp_avg(), 1e-6, 1e-5));
    EXPECT_TRUE(close(f.exp_avg_sq(), r.exp_avg_sq(), 1e-7, 1e-5));
  }
}

// The trainer's update: the clipping factor handed to adam_step gives the parameters and state
// that scaling the gradients in place (clip_grad_norm) and then stepping give, bit for bit, on
// the fused path and on optimizer.step()'s (weight decay); an unclipped step too.
TEST(AdamKernel, ClippingInsideTheStepEqualsClippingTheGradients) {
  for (double weight_decay : {0.0, 0.01})
    for (double max_norm : {0.5, 1e6}) {
      SCOPED_TRACE(::testing::Message()
                   << "weight decay " << weight_decay << ", max norm " << max_norm);
      at::manual_seed(17);
      auto make = [] {
        return std::vector<at::Tensor>{at::randn({37, 5}).requires_grad_(),
                                       at::randn({19}).requires_grad_()};
      };
      auto clipped = make(), folded = make();
      for (size_t i = 0; i < clipped.size(); ++i) {
        at::NoGradGuard no_grad;
        folded[i].copy_(clipped[i]);
      }
      const auto options = torch::optim::AdamOptions(3e-3).weight_decay(weight_decay);
      torch::optim::Adam clipped_opt(clipped, options), folded_opt(folded, options);
      for (int step = 0; step < 3; ++step) {
        for (size_t i = 0; i < clipped.size(); ++i) {
          const auto g = at::randn(clipped[i].sizes()) * 3;
          clipped[i].mutable_grad() = g.clone();
          folded[i].mutable_grad() = g.clone();
        }
        const double norm = train::clip_grad_norm(clipped, max_norm);
        train::adam_step(clipped_opt);
        const auto clip = train::grad_clip(folded, max_norm);
        EXPECT_EQ(clip.norm, norm);
        EXPECT_EQ(clip.scale < 1, max_norm < norm);
        train::adam_step(folded_opt, clip.scale);
        for (size_t i = 0; i < clipped.size(); ++i)
          EXPECT_TRUE(at::equal(folded[i], clipped[i])) << "step " << step << ", param " << i;
      }
    }
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

// unpad keeps the rows of mask.nonzero() in order, pad puts them back with zeros on the padding,
// and each is the other's gradient: an empty sequence, a full one, a trailing feature shape.
TEST(RaggedRows, UnpadIsIndexSelectAndPadItsGradient) {
  at::manual_seed(21);
  const auto lengths = at::tensor({3, 0, 5, 1}, at::kLong);
  const auto mask = at::arange(5, at::kLong).unsqueeze(0) < lengths.unsqueeze(1);  // [4, 5]
  const auto ragged = kernels::Ragged::from_mask(mask);
  EXPECT_EQ(ragged.lengths, (std::vector<int64_t>{3, 0, 5, 1}));
  EXPECT_EQ(ragged.rows(), 9);
  const auto x = at::randn({4, 5, 2, 3}, at::kDouble);
  const auto rows = mask.reshape(-1).nonzero().squeeze(1);
  const auto real = x.reshape({20, 2, 3}).index_select(0, rows);
  EXPECT_TRUE(at::equal(kernels::unpad(x, ragged), real));
  EXPECT_TRUE(at::equal(kernels::unpad(x.transpose(2, 3).contiguous().transpose(2, 3), ragged),
                        real));  // any strides
  const auto padded = kernels::pad(real, ragged);
  EXPECT_TRUE(at::equal(padded, x * mask.view({4, 5, 1, 1})));
  // Integer tensors too (the targets of a batch).
  const auto tokens = at::randint(1, 9, {4, 5}, at::kLong);
  EXPECT_TRUE(at::equal(kernels::unpad(tokens, ragged), tokens.reshape(-1).index_select(0, rows)));

  const auto r_real = at::randn_like(real), r_padded = at::randn_like(x);
  auto xd = x.clone().requires_grad_();
  EXPECT_TRUE(gradcheck([&] { return (kernels::unpad(xd, ragged) * r_real).sum(); }, {xd}));
  auto rd = real.clone().requires_grad_();
  EXPECT_TRUE(gradcheck([&] { return (kernels::pad(rd, ragged) * r_padded).sum(); }, {rd}));
}

// A batch large enough for the copies to be split between threads (sequences in blocks): still
// index_select's rows, and pad still its inverse with zeros on the padding.
TEST(RaggedRows, SplitBetweenThreadsTheRowsAreTheSame) {
  at::manual_seed(22);
  set_threads(2, ThreadPolicy::Kernels);
  const auto lengths = at::randint(0, 31, {64}, at::kLong);
  const auto mask = at::arange(30, at::kLong).unsqueeze(0) < lengths.unsqueeze(1);  // [64, 30]
  const auto ragged = kernels::Ragged::from_mask(mask);
  const auto x = at::randn({64, 30, 256});  // 1.9 MiB: several parts
  const auto real =
      x.reshape({64 * 30, 256}).index_select(0, mask.reshape(-1).nonzero().squeeze(1));
  const auto unpadded = kernels::unpad(x, ragged), padded = kernels::pad(real, ragged);
  set_threads(1);
  EXPECT_TRUE(at::equal(unpadded, real));
  EXPECT_TRUE(at::equal(padded, x * mask.unsqueeze(2)));
}

TEST(RaggedRows, RefusesAMaskThatIsNotAPrefixAndShapesThatDoNotFit) {
  const auto holes = at::tensor({1, 0, 1}, at::kLong).eq(1).view({1, 3});
  EXPECT_THROW(kernels::Ragged::from_mask(holes), c10::Error);
  const auto ragged = kernels::Ragged::from_mask(at::ones({2, 3}, at::kBool));
  EXPECT_THROW(kernels::unpad(at::zeros({2, 4, 1}), ragged), c10::Error);
  EXPECT_THROW(kernels::pad(at::zeros({5, 1}), ragged), c10::Error);
}

// The lookup is at::embedding's, and its table gradient has the bits of ATen's dense one (each
// row's positions added in order; repeated ids, padding skipped) on one thread and two, in float
// and double. 3000 x 64 table, 40 x 50 ids: the backward's columns are split.
TEST(EmbeddingKernel, IsAtEmbeddingWithItsGradientOnAnyThreads) {
  at::manual_seed(32);
  for (auto type : {at::kFloat, at::kDouble}) {
    SCOPED_TRACE(c10::toString(type));
    auto w0 = at::randn({3000, 64}, type);
    auto ids = at::randint(0, 60, {40, 50}, at::kLong);  // many repeats of each id
    ids.index_put_({at::indexing::Slice(), 0}, 0);       // and padding
    auto dy = at::randn({40, 50, 64}, type);
    auto reference = w0.clone().requires_grad_();
    auto expected = at::embedding(reference, ids, /*padding_idx=*/0);
    (expected * dy).sum().backward();
    for (int threads : {1, 2}) {
      set_threads(threads, ThreadPolicy::Kernels);
      auto w = w0.clone().requires_grad_();
      auto y = kernels::embedding(w, ids, /*padding_idx=*/0);
      EXPECT_TRUE(at::equal(y, expected));
      (y * dy).sum().backward();
      EXPECT_TRUE(at::equal(w.grad(), reference.grad())) << threads << " thread(s)";
      EXPECT_EQ(w.grad()[0].abs().sum().item<double>(), 0.0) << "the padding row";
    }
    set_threads(1);
  }
  EXPECT_THROW(kernels::embedding(at::zeros({5, 2}), at::tensor({5}, at::kLong), -1), c10::Error);
}

// A training batch's input (the Transformer's embed(): lookup, times sqrt(d), plus each position's
// sinusoid) and its weight gradient have the composite's bits, repeated ids and padding
// included, on one thread and two; ids outside the table and mismatched shapes are refused.
TEST(EmbeddingKernel, EmbedIsTheLookupScaledPlusPositionsWithItsGradientBitForBit) {
  at::manual_seed(34);
  const auto w0 = at::randn({700, 64}), positions = at::randn({50, 64});
  auto ids = at::randint(0, 60, {40, 50}, at::kLong);  // many repeats of each id
  ids.index_put_({at::indexing::Slice(), -1}, 0);      // and padding
  const auto dy = at::randn({40, 50, 64});
  const double scale = std::sqrt(64.0);
  auto reference = w0.clone().requires_grad_();
  const auto expected = at::embedding(reference, ids, /*padding_idx=*/0) * scale + positions;
  (expected * dy).sum().backward();
  for (int threads : {1, 2}) {
    set_threads(threads, ThreadPolicy::Kernels);
    auto w = w0.clone().requires_grad_();
    const auto y = kernels::embed(w, ids.to(at::kInt), scale, positions, /*padding_idx=*/0);
    EXPECT_TRUE(at::equal(y, expected)) << threads << " thread(s)";
    (y * dy).sum().backward();
    EXPECT_TRUE(at::equal(w.grad(), reference.grad())) << threads << " thread(s)";
    EXPECT_EQ(w.grad()[0].abs().sum().item<double>(), 0.0) << "the padding row";
  }
  set_threads(1);
  EXPECT_THROW(kernels::embed(w0, at::full({1, 50}, 700, at::kLong), scale, positions, -1),
               c10::Error);
  EXPECT_THROW(kernels::embed(w0, ids, scale, positions.narrow(0, 0, 49), -1), c10::Error);
}

// A decoding step's input has the bits of the composite it replaces (the Transformer's embed():
// lookup, times sqrt(d), plus the position's sinusoid), repeated ids included; ids outside the
// table are refused.
TEST(EmbeddingKernel, StepIsTheLookupScaledPlusThePositionBitForBit) {
  at::manual_seed(33);
  const auto w = at::randn({500, 256}), position = at::randn({256});
  auto ids = at::randint(0, 500, {160}, at::kLong);
  ids.index_put_({at::indexing::Slice(0, 5)}, 7);
  const double scale = std::sqrt(256.0);
  const auto expected = at::embedding(w, ids) * scale + position;
  EXPECT_TRUE(at::equal(kernels::embed_step(w, ids, scale, position), expected));
  EXPECT_TRUE(at::equal(kernels::embed_step(w, ids.to(at::kInt), 0.37, position),
                        at::embedding(w, ids) * 0.37 + position));
  EXPECT_THROW(kernels::embed_step(w, at::tensor({500}, at::kLong), scale, position), c10::Error);
  EXPECT_THROW(kernels::embed_step(w, at::tensor({-1}, at::kLong), scale, position), c10::Error);
  EXPECT_THROW(kernels::embed_step(w, ids, scale, at::randn({255})), c10::Error);
}

// The two blocks are w's columns (views), and their gradients land in one [R, C] gradient with
// the bits of two narrows' (a block without a gradient gets zeros), on one thread and two, in
// float and double. 300 x 700: the backward's rows are split.
TEST(ColumnSplit, ViewsWhoseGradientIsTheTwoNarrowsOnAnyThreads) {
  at::manual_seed(31);
  for (auto type : {at::kFloat, at::kDouble})
    for (int use : {3, 1, 2}) {  // both blocks, the left only, the right only
      SCOPED_TRACE(std::string(c10::toString(type)) + ", blocks " + std::to_string(use));
      auto w0 = at::randn({300, 700}, type);
      auto gl = at::randn({300, 200}, type), gr = at::randn({300, 500}, type);
      auto reference = w0.clone().requires_grad_();
      auto loss_of = [&](const at::Tensor& left, const at::Tensor& right) {
        auto loss = at::zeros({}, type);
        if (use & 1) loss = loss + (left * gl).sum();
        if (use & 2) loss = loss + (right * gr).sum();
        return loss;
      };
      loss_of(reference.narrow(1, 0, 200), reference.narrow(1, 200, 500)).backward();
      for (int threads : {1, 2}) {
        set_threads(threads, ThreadPolicy::Kernels);
        auto w = w0.clone().requires_grad_();
        auto [left, right] = kernels::split_columns(w, 200);
        EXPECT_TRUE(at::equal(left, w0.narrow(1, 0, 200)));
        EXPECT_TRUE(at::equal(right, w0.narrow(1, 200, 500)));
        EXPECT_EQ(left.data_ptr(), w.data_ptr()) << "a view, not a copy";
        loss_of(left, right).backward();
        EXPECT_TRUE(at::equal(w.grad(), reference.grad())) << threads << " thread(s)";
      }
      set_threads(1);
    }
  EXPECT_THROW(kernels::split_columns(at::zeros({3, 4}), 4), c10::Error);
}

}  // namespace
}  // namespace attnkit
