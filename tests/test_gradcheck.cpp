// Finite-difference gradient checks in double for every differentiable path, and the
// estimators of hard attention: straight-through and Gumbel gradients equal their softmaxes'.

#include <gtest/gtest.h>

#include <torch/csrc/autograd/autograd.h>
#include "attnkit/attention/attention.h"
#include "attnkit/attention/combine.h"
#include "attnkit/attention/functional.h"
#include "attnkit/attention/mask.h"
#include "attnkit/attention/notes.h"
#include "attnkit/attention/score.h"
#include "attnkit/attention/self_attention.h"

#include "testing.h"

namespace attnkit {
namespace {

using testing::close;
using testing::gradcheck;
using testing::projection_loss;

at::Tensor leaf(at::IntArrayRef shape, uint64_t seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  return at::randn(shape, gen, at::TensorOptions().dtype(at::kDouble)).requires_grad_();
}

std::vector<at::Tensor> concat(std::vector<at::Tensor> a, const std::vector<at::Tensor>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

class AttentionGradcheck : public ::testing::TestWithParam<testing::ScoreWeighting> {};

TEST_P(AttentionGradcheck, MatchesFiniteDifferences) {
  const auto [score, weighting] = GetParam();
  at::manual_seed(3);
  Attention attn(AttentionOptions(3, 3).score(score).weighting(weighting).hidden_size(4).window(2));
  attn->to(at::kDouble);
  auto q = leaf({2, 2, 3}, 1), k = leaf({2, 4, 3}, 2), v = leaf({2, 4, 2}, 3);
  auto mask = padding_mask(at::tensor({4, 3}), 4);
  auto loss = [&] {
    auto r = attn->forward(q, k, v, mask);
    return projection_loss(r.output, r.weights, 9);
  };
  EXPECT_TRUE(gradcheck(loss, concat({q, k, v}, testing::parameters_of(*attn))));
}

INSTANTIATE_TEST_SUITE_P(SoftAndLocal, AttentionGradcheck,
                         ::testing::ValuesIn(testing::all_scores_with({WeightingKind::Soft,
                                                                       WeightingKind::Local})),
                         [](const auto& info) { return testing::test_name(info.param); });

// The decoder's path: keys projected once, the query block of the weight taken once and reused
// by every step. The same values and parameter gradients as taking both at every step.
TEST(Gradcheck, AttendWithAHoistedQueryWeightEqualsThePlainStep) {
  for (auto kind : {ScoreKind::Additive, ScoreKind::Bahdanau}) {
    at::manual_seed(4);
    Attention attn(AttentionOptions(3, 5).score(kind).hidden_size(4));  // fused float path
    auto k = at::randn({2, 4, 5}), v = at::randn({2, 4, 2});
    auto mask = padding_mask(at::tensor({4, 3}), 4);
    std::vector<at::Tensor> queries = {at::randn({2, 1, 3}), at::randn({2, 1, 3})};
    auto run = [&](bool hoisted) {
      for (auto& p : attn->parameters()) p.mutable_grad() = at::Tensor();
      auto keys = attn->project_keys(k);
      auto w = hoisted ? attn->score->query_weight() : at::Tensor();
      at::Tensor loss = at::zeros({});
      for (size_t t = 0; t < queries.size(); ++t) {  // two steps share the keys and the view
        auto r = attn->attend(queries[t], keys, v, mask, w);
        loss = loss + projection_loss(r.output, r.weights, 20 + t);
      }
      loss.backward();
      std::vector<at::Tensor> grads;
      for (auto& p : attn->parameters()) grads.push_back(p.grad().clone());
      return std::make_pair(loss.detach(), grads);
    };
    ASSERT_TRUE(attn->score->query_weight().defined());
    auto [plain_loss, plain] = run(false);
    auto [hoisted_loss, hoisted] = run(true);
    EXPECT_TRUE(close(hoisted_loss, plain_loss));
    ASSERT_EQ(hoisted.size(), plain.size());
    for (size_t i = 0; i < plain.size(); ++i) EXPECT_TRUE(close(hoisted[i], plain[i])) << i;
  }
  EXPECT_FALSE(Score(ScoreOptions(ScoreKind::Dot, 3, 3))->query_weight().defined());
}

TEST(Gradcheck, MultiheadWithPaddingAndCausalMasks) {
  at::manual_seed(4);
  MultiheadAttention mha(MultiheadAttentionOptions(4, 2));
  mha->to(at::kDouble);
  auto x = leaf({2, 3, 4}, 5), memory = leaf({2, 4, 4}, 6);
  auto cross_mask = padding_mask(at::tensor({4, 2}), 4);
  auto self_mask = padding_mask(at::tensor({3, 2}), 3).logical_and(causal_mask(3, 3));
  auto loss = [&] {
    auto cross = mha->forward(x, memory, memory, cross_mask);
    auto self = mha->forward(x, x, x, self_mask);
    return projection_loss(cross.output, cross.weights, 1) +
           projection_loss(self.output, self.weights, 2);
  };
  EXPECT_TRUE(gradcheck(loss, concat({x, memory}, testing::parameters_of(*mha))));
}

TEST(Gradcheck, ProjectedSelfAttention) {
  at::manual_seed(5);
  SelfAttention attn(SelfAttentionOptions(3));
  attn->to(at::kDouble);
  auto x = leaf({2, 4, 3}, 7);
  auto mask = padding_mask(at::tensor({4, 2}), 4);
  auto loss = [&] {
    auto r = attn->forward(x, mask);
    return projection_loss(r.output, r.weights, 3);
  };
  EXPECT_TRUE(gradcheck(loss, concat({x}, testing::parameters_of(*attn))));
}

TEST(Gradcheck, AttentionCombine) {
  at::manual_seed(6);
  AttentionCombine attn(AttentionCombineOptions(3, 3, 2, 4));
  attn->to(at::kDouble);
  auto q = leaf({2, 1, 3}, 8), k = leaf({2, 5, 3}, 9), v = leaf({2, 5, 2}, 10);
  auto loss = [&] {
    auto r = attn->forward(q, k, v);
    return projection_loss(r.output, r.weights, 4);
  };
  EXPECT_TRUE(gradcheck(loss, concat({q, k, v}, testing::parameters_of(*attn))));
}

TEST(Gradcheck, SeedSoftAndSelfAttention) {
  auto q = leaf({2, 3}, 11), k = leaf({4, 3}, 12), v = leaf({4, 2}, 13), x = leaf({3, 3}, 14);
  auto loss = [&] {
    auto [so, sw] = soft_attention(q, k, v);
    auto [xo, xw] = self_attention(x);
    return projection_loss(so, sw, 5) + projection_loss(xo, xw, 6);
  };
  EXPECT_TRUE(gradcheck(loss, {q, k, v, x}));
}

// Straight-through: forward is one-hot, the gradient is exactly the softmax's.
TEST(HardGradients, StraightThroughEqualsSoftmaxGradient) {
  auto scores = leaf({2, 3, 5}, 15);
  auto mask = padding_mask(at::tensor({5, 2}), 5);
  auto r = leaf({2, 3, 5}, 16).detach();
  auto hard = functional::hard_weights(scores, mask, HardGradient::StraightThrough);
  EXPECT_TRUE(close(hard.sum(-1), at::ones({2, 3}, at::kDouble), 1e-12, 0));
  EXPECT_TRUE(((hard == 0) | (hard.sub(1).abs() < 1e-12)).all().item<bool>());
  auto g_hard = torch::autograd::grad({(hard * r).sum()}, {scores})[0];
  auto g_soft =
      torch::autograd::grad({(functional::soft_weights(scores, mask) * r).sum()}, {scores})[0];
  EXPECT_TRUE(close(g_hard, g_soft, 1e-12, 0));
  EXPECT_GT(g_hard.abs().sum().item<double>(), 0);
}

TEST(HardGradients, GumbelEqualsGumbelSoftmaxGradient) {
  auto scores = leaf({2, 3, 5}, 17);
  auto noise = -at::empty({2, 3, 5}, at::kDouble).exponential_().log();
  auto r = leaf({2, 3, 5}, 18).detach();
  auto hard = functional::hard_weights(scores, {}, HardGradient::Gumbel, 0.5, noise);
  auto soft = functional::gumbel_soft_weights(scores, {}, 0.5, noise);
  EXPECT_TRUE(close(hard.argmax(-1), soft.argmax(-1), 0, 0));
  auto g_hard = torch::autograd::grad({(hard * r).sum()}, {scores})[0];
  auto g_soft = torch::autograd::grad({(soft * r).sum()}, {scores})[0];
  EXPECT_TRUE(close(g_hard, g_soft, 1e-12, 0));
}

TEST(HardGradients, PlainHardHasNoGradient) {
  auto scores = leaf({1, 2, 4}, 19);
  auto hard = functional::hard_weights(scores);
  EXPECT_FALSE(hard.requires_grad());
}

TEST(HardGradients, EvalModeIsPlainArgmax) {
  Attention attn(AttentionOptions(3, 3)
                     .score(ScoreKind::Dot)
                     .weighting(WeightingKind::Hard)
                     .hard_gradient(HardGradient::Gumbel));
  attn->eval();
  auto q = at::randn({2, 2, 3}), k = at::randn({2, 4, 3});
  auto r = attn->forward(q, k, k);
  auto expected = functional::hard_weights(functional::dot_score(q, k));
  EXPECT_TRUE(close(r.weights, expected, 0, 0));
}

}  // namespace
}  // namespace attnkit
