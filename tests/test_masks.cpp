// Mask invariants for every score x weighting: weights sum to 1 over valid keys (soft, hard),
// masked keys get exactly 0, fully masked and empty rows give zeros and never NaN.

#include <gtest/gtest.h>

#include "attnkit/attention/attention.h"
#include "attnkit/attention/functional.h"
#include "attnkit/attention/mask.h"
#include "attnkit/attention/self_attention.h"
#include "testing.h"

namespace attnkit {
namespace {

using testing::close;

TEST(Masks, PaddingMaskFromLengths) {
  auto m = padding_mask(at::tensor({3, 1, 0}), 4);
  EXPECT_EQ(m.sizes(), (std::vector<int64_t>{3, 1, 4}));
  auto expected = at::tensor({1, 1, 1, 0, 1, 0, 0, 0, 0, 0, 0, 0}).reshape({3, 1, 4}).to(at::kBool);
  EXPECT_TRUE(m.equal(expected));
}

TEST(Masks, KeyPaddingMaskIsInverted) {
  auto kpm = at::tensor({0, 0, 1}).reshape({1, 3}).to(at::kBool);  // PyTorch: True = pad
  EXPECT_TRUE(
      from_key_padding_mask(kpm).equal(at::tensor({1, 1, 0}).reshape({1, 1, 3}).to(at::kBool)));
}

TEST(Masks, CausalIsLowerTriangular) {
  auto m = causal_mask(3, 3);
  EXPECT_TRUE(m.squeeze(0).equal(at::ones({3, 3}, at::kBool).tril()));
}

class MaskInvariants : public ::testing::TestWithParam<testing::ScoreWeighting> {};

TEST_P(MaskInvariants, MaskedKeysGetZeroAndNothingIsNaN) {
  const auto [score, weighting] = GetParam();
  at::manual_seed(0);
  Attention attn(AttentionOptions(4, 4).score(score).weighting(weighting).window(2));
  // Row 0: all 6 keys; row 1: 2 keys; row 2: none (fully masked).
  auto q = at::randn({3, 2, 4}).requires_grad_(), k = at::randn({3, 6, 4}).requires_grad_(),
       v = at::randn({3, 6, 5}).requires_grad_();
  auto mask = padding_mask(at::tensor({6, 2, 0}), 6);
  auto r = attn->forward(q, k, v, mask);
  EXPECT_TRUE(at::isfinite(r.weights).all().item<bool>());
  EXPECT_TRUE(at::isfinite(r.output).all().item<bool>());
  EXPECT_TRUE(
      (r.weights.masked_select(mask.logical_not().expand({3, 2, 6})) == 0).all().item<bool>());
  EXPECT_TRUE((r.weights[2] == 0).all().item<bool>()) << "fully masked row";
  EXPECT_TRUE((r.output[2] == 0).all().item<bool>()) << "fully masked context";
  EXPECT_TRUE((r.weights >= 0).all().item<bool>());
  auto sums = r.weights.sum(-1).slice(0, 0, 2);  // the rows with valid keys
  if (weighting == WeightingKind::Local) {
    EXPECT_TRUE((sums <= 1 + 1e-6).all().item<bool>()) << sums;
    EXPECT_TRUE((sums > 0).all().item<bool>()) << sums;
  } else {
    EXPECT_TRUE(close(sums, at::ones({2, 2}), 1e-6, 0));
  }
  (r.output.sum() + r.weights.sum()).backward();
  for (const auto& t : {q, k, v}) EXPECT_TRUE(at::isfinite(t.grad()).all().item<bool>());
  for (const auto& p : attn->parameters())
    EXPECT_TRUE(!p.grad().defined() || at::isfinite(p.grad()).all().item<bool>());
  // Keys that are never attended to get no gradient.
  EXPECT_TRUE((v.grad()[2] == 0).all().item<bool>());
  EXPECT_TRUE((v.grad()[1].slice(0, 2) == 0).all().item<bool>());
}

TEST_P(MaskInvariants, EmptyKeysGiveZeroContext) {
  const auto [score, weighting] = GetParam();
  Attention attn(AttentionOptions(4, 4).score(score).weighting(weighting));
  auto r = attn->forward(at::randn({2, 3, 4}), at::randn({2, 0, 4}), at::randn({2, 0, 5}));
  EXPECT_EQ(r.weights.sizes(), (std::vector<int64_t>{2, 3, 0}));
  EXPECT_TRUE(close(r.output, at::zeros({2, 3, 5}), 0, 0));
}

INSTANTIATE_TEST_SUITE_P(AllScoresAndWeightings, MaskInvariants,
                         ::testing::ValuesIn(testing::all_scores_with(
                             {WeightingKind::Soft, WeightingKind::Hard, WeightingKind::Local})),
                         [](const auto& info) { return testing::test_name(info.param); });

TEST(MaskInvariants, HardPicksTheBestUnmaskedKey) {
  auto scores = at::tensor({5.0f, 1.0f, 9.0f, 2.0f}).reshape({1, 1, 4});
  auto mask = padding_mask(at::tensor({2}), 4);  // key 2 (score 9) is padding
  auto w = functional::hard_weights(scores, mask);
  EXPECT_TRUE(w.equal(at::tensor({1.0f, 0.0f, 0.0f, 0.0f}).reshape({1, 1, 4})));
}

TEST(MaskInvariants, LocalWindowZeroesKeysOutsideIt) {
  auto scores = at::zeros({1, 1, 9});
  auto centres = at::full({1, 1}, 4.0f);
  auto w = functional::local_weights(scores, centres, 2);
  // Keys 2..6 are inside |j - 4| <= 2: softmax 1/5 each times the Gaussian (sigma = 1).
  auto j = at::arange(9).to(at::kFloat);
  auto expected = ((j - 4).abs() <= 2).to(at::kFloat) * 0.2f * at::exp(-(j - 4).pow(2) / 2.0f);
  EXPECT_TRUE(close(w.flatten(), expected, 1e-7, 0));
}

TEST(MaskInvariants, CausalSelfAttentionNeverLooksAhead) {
  at::manual_seed(1);
  MultiheadAttention mha(MultiheadAttentionOptions(8, 2));
  auto x = at::randn({2, 5, 8});
  auto r = mha->forward(x, x, x, causal_mask(5, 5));
  auto above = at::ones({5, 5}, at::kBool).triu(1);
  EXPECT_TRUE((r.weights.masked_select(above.expand({2, 2, 5, 5})) == 0).all().item<bool>());
  EXPECT_TRUE(close(r.weights.sum(-1), at::ones({2, 2, 5}), 1e-6, 0));
  // Changing a future token leaves earlier outputs unchanged.
  auto y = x.clone();
  y.select(1, 4).add_(10);
  auto r2 = mha->forward(y, y, y, causal_mask(5, 5));
  EXPECT_TRUE(close(r2.output.slice(1, 0, 4), r.output.slice(1, 0, 4), 1e-6, 0));
}

TEST(MaskInvariants, MultiheadFullyMaskedRowIsZeroNotNaN) {
  MultiheadAttention mha(MultiheadAttentionOptions(4, 2));
  auto q = at::randn({2, 3, 4}), kv = at::randn({2, 4, 4});
  auto r = mha->forward(q, kv, kv, padding_mask(at::tensor({4, 0}), 4));
  EXPECT_TRUE(at::isfinite(r.output).all().item<bool>());
  EXPECT_TRUE((r.weights[1] == 0).all().item<bool>());
  // With a zero context, the output is the output projection's bias.
  EXPECT_TRUE(close(r.output[1], mha->out_proj->bias.expand({3, 4}), 1e-7, 0));
}

}  // namespace
}  // namespace attnkit
