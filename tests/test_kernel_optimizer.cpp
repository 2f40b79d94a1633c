// Gradient clipping against torch::nn::utils::clip_grad_norm_, the fused Adam against
// torch::optim::Adam, and the bias gradients' column sums, on any threads.

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

}  // namespace
}  // namespace attnkit
