// Every score x weighting, multi-head and projected self-attention against PyTorch: outputs,
// weights and the gradients of every input and parameter (fixtures: scripts/make_golden.py).

#include <gtest/gtest.h>

#include "attnkit/attention/attention.h"
#include "attnkit/attention/functional.h"
#include "attnkit/attention/mask.h"
#include "attnkit/attention/self_attention.h"
#include "attnkit/io/state_dict.h"
#include "testing.h"

namespace attnkit {
namespace {

using testing::close;

struct GoldenCase {
  std::string score, weighting;
};
void PrintTo(const GoldenCase& c, std::ostream* os) { *os << c.score << "/" << c.weighting; }

std::vector<GoldenCase> all_cases() {
  std::vector<GoldenCase> cases;
  for (auto s : {"concat", "additive", "bahdanau", "scaled-dot", "dot", "general"})
    for (auto w : {"soft", "hard", "gumbel", "local"}) cases.push_back({s, w});
  return cases;
}

class AttentionGolden : public ::testing::TestWithParam<GoldenCase> {};

TEST_P(AttentionGolden, OutputsWeightsAndGradients) {
  const GoldenCase c = GetParam();
  const std::string prefix = c.score + "/" + c.weighting + "/";
  auto g = testing::with_prefix(testing::golden("attention_cases.pt"), prefix);
  auto get = [&](const std::string& k) { return io::find(g, k, prefix); };

  const bool gumbel = c.weighting == "gumbel";
  Attention attn(AttentionOptions(4, 4)
                     .score(parse_score_kind(c.score))
                     .weighting(gumbel ? WeightingKind::Hard : parse_weighting_kind(c.weighting))
                     .hard_gradient(gumbel ? HardGradient::Gumbel : HardGradient::StraightThrough)
                     .hidden_size(6)
                     .window(2)
                     .temperature(0.7));
  io::load_state_dict(*attn, testing::with_prefix(g, "param."));

  auto q = get("q").clone().requires_grad_(), k = get("k").clone().requires_grad_(),
       v = get("v").clone().requires_grad_();
  auto mask = padding_mask(get("lengths"), k.size(1));
  if (gumbel) at::manual_seed(1234);  // the fixture drew its noise right after this seed
  auto r = attn->forward(q, k, v, mask);
  EXPECT_TRUE(close(r.weights, get("weights"))) << "weights";
  EXPECT_TRUE(close(r.output, get("output"))) << "output";

  ((r.output * get("r_out")).sum() + (r.weights * get("r_w")).sum()).backward();
  EXPECT_TRUE(close(q.grad(), get("grad.q"))) << "grad q";
  EXPECT_TRUE(close(k.grad(), get("grad.k"))) << "grad k";
  EXPECT_TRUE(close(v.grad(), get("grad.v"))) << "grad v";
  for (const auto& p : attn->named_parameters())
    EXPECT_TRUE(close(p.value().grad(), get("grad." + p.key()))) << "grad " << p.key();
}

INSTANTIATE_TEST_SUITE_P(AllScoresAndWeightings, AttentionGolden, ::testing::ValuesIn(all_cases()),
                         [](const auto& info) {
                           std::string n = info.param.score + "_" + info.param.weighting;
                           for (auto& ch : n)
                             if (ch == '-') ch = '_';
                           return n;
                         });

// The functional layer with the fixture's own noise, independent of the generator's state.
class GumbelGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(GumbelGolden, FunctionalWithGivenNoise) {
  const std::string score_name = GetParam();
  const std::string prefix = score_name + "/gumbel/";
  auto g = testing::with_prefix(testing::golden("attention_cases.pt"), prefix);
  auto get = [&](const std::string& k) { return io::find(g, k, prefix); };
  Score score(ScoreOptions(parse_score_kind(score_name), 4, 4).hidden_size(6));
  io::load_state_dict(*score, testing::with_prefix(g, "param.score."));
  torch::NoGradGuard no_grad;
  auto scores = score->forward(get("q"), get("k"));
  auto w = functional::hard_weights(scores, padding_mask(get("lengths"), 5), HardGradient::Gumbel,
                                    0.7, get("noise"));
  EXPECT_TRUE(close(w, get("weights")));
}

INSTANTIATE_TEST_SUITE_P(AllScores, GumbelGolden,
                         ::testing::Values("concat", "additive", "bahdanau", "scaled-dot", "dot",
                                           "general"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (auto& ch : n)
                             if (ch == '-') ch = '_';
                           return n;
                         });

void check_multihead_case(MultiheadAttention& mha, const io::TensorDict& g,
                          const std::vector<std::string>& inputs, const at::Tensor& mask) {
  auto get = [&](const std::string& k) { return io::find(g, k, "multihead"); };
  mha->zero_grad();
  std::vector<at::Tensor> xs;
  for (const auto& name : inputs) xs.push_back(get(name).clone().requires_grad_());
  const auto& q = xs[0];
  const auto& k = xs.size() > 1 ? xs[1] : xs[0];
  const auto& v = xs.size() > 2 ? xs[2] : xs[0];
  auto r = mha->forward(q, k, v, mask);
  EXPECT_TRUE(close(r.weights, get("weights")));
  EXPECT_TRUE(close(r.output, get("output")));
  ((r.output * get("r_out")).sum() + (r.weights * get("r_w")).sum()).backward();
  for (size_t i = 0; i < inputs.size(); ++i)
    EXPECT_TRUE(close(xs[i].grad(), get("grad." + inputs[i]))) << "grad " << inputs[i];
  for (const auto& p : mha->named_parameters())
    EXPECT_TRUE(close(p.value().grad(), get("grad." + p.key()))) << "grad " << p.key();
}

TEST(MultiheadGolden, CrossAttentionWithPaddingMatchesTorchNn) {
  MultiheadAttention mha(MultiheadAttentionOptions(8, 2));
  io::load_state_dict(*mha, io::load_tensor_dict(testing::golden_path("multihead_state.pt")));
  auto g = testing::with_prefix(testing::golden("multihead.pt"), "cross/");
  check_multihead_case(mha, g, {"q", "k", "v"}, padding_mask(io::find(g, "lengths", "cross"), 5));
}

TEST(MultiheadGolden, CausalSelfAttentionMatchesTorchNn) {
  MultiheadAttention mha(MultiheadAttentionOptions(8, 2));
  io::load_state_dict(*mha, io::load_tensor_dict(testing::golden_path("multihead_state.pt")));
  auto g = testing::with_prefix(testing::golden("multihead.pt"), "causal/");
  auto mask = padding_mask(io::find(g, "lengths", "causal"), 4).logical_and(causal_mask(4, 4));
  check_multihead_case(mha, g, {"x"}, mask);
}

TEST(SelfAttentionGolden, ProjectedWithPadding) {
  auto g = testing::with_prefix(testing::golden("self_attention.pt"), "projected/");
  auto get = [&](const std::string& k) { return io::find(g, k, "projected"); };
  SelfAttention attn(SelfAttentionOptions(6));
  io::load_state_dict(*attn, testing::with_prefix(g, "param."));
  auto x = get("x").clone().requires_grad_();
  auto r = attn->forward(x, padding_mask(get("lengths"), 4));
  EXPECT_TRUE(close(r.weights, get("weights")));
  EXPECT_TRUE(close(r.output, get("output")));
  ((r.output * get("r_out")).sum() + (r.weights * get("r_w")).sum()).backward();
  EXPECT_TRUE(close(x.grad(), get("grad.x")));
  for (const auto& p : attn->named_parameters())
    EXPECT_TRUE(close(p.value().grad(), get("grad." + p.key()))) << "grad " << p.key();
}

}  // namespace
}  // namespace attnkit
