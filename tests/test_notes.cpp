// The notes' worked examples, to four decimals, and against the notes' own PyTorch code.

#include <gtest/gtest.h>

#include "attnkit/attention/combine.h"
#include "attnkit/attention/notes.h"
#include "attnkit/io/state_dict.h"
#include "testing.h"

namespace attnkit {
namespace {

using testing::close;
using testing::golden;

const at::Tensor Q = at::tensor({1.0f, 0.0f, 0.0f}).reshape({1, 3});
const at::Tensor I3 = at::eye(3);

TEST(Seed, SoftAttentionWeights) {
  auto [output, weights] = soft_attention(Q, I3, I3);
  EXPECT_TRUE(close(weights, at::tensor({0.5761f, 0.2119f, 0.2119f}).reshape({1, 3}), 5e-5, 0));
  EXPECT_TRUE(close(output, weights, 1e-7, 0));  // V = I3
  EXPECT_NEAR(weights.sum().item<double>(), 1.0, 1e-6);
}

TEST(Seed, HardAttentionWeights) {
  auto [output, weights] = hard_attention(Q, I3, I3);
  EXPECT_TRUE(close(weights, at::tensor({1.0f, 0.0f, 0.0f}).reshape({1, 3}), 0, 0));
  EXPECT_TRUE(close(output, at::tensor({1.0f, 0.0f, 0.0f}).reshape({1, 3}), 0, 0));
}

TEST(Seed, SelfAttentionOfIdentity) {
  auto [output, weights] = self_attention(I3);
  auto expected = at::full({3, 3}, 0.2645f) + at::eye(3) * (0.4711f - 0.2645f);
  EXPECT_TRUE(close(weights, expected, 5e-5, 0));
  EXPECT_TRUE(close(weights.sum(-1), at::ones({3}), 1e-6, 0));
}

TEST(Seed, MatchesTheSeedsPyTorchCode) {
  const auto& g = golden("notes.pt");
  auto get = [&](const std::string& k) { return io::find(g, k, "notes.pt"); };
  auto [so, sw] = soft_attention(get("Q"), get("K"), get("V"));
  EXPECT_TRUE(close(sw, get("soft.weights")));
  EXPECT_TRUE(close(so, get("soft.output")));
  auto [ho, hw] = hard_attention(get("Q"), get("K"), get("V"));
  EXPECT_TRUE(close(hw, get("hard.weights"), 0, 0));
  EXPECT_TRUE(close(ho, get("hard.output"), 0, 0));
  auto [xo, xw] = self_attention(get("X"));
  EXPECT_TRUE(close(xw, get("self.weights")));
  EXPECT_TRUE(close(xo, get("self.output")));
}

TEST(Seed, AttnModuleShapes) {
  at::manual_seed(0);
  AttentionCombine attn(AttentionCombineOptions(8, 8, 8, 8));
  auto r = attn->forward(at::randn({2, 1, 8}), at::randn({2, 5, 8}), at::randn({2, 5, 8}));
  EXPECT_EQ(r.output.sizes(), (std::vector<int64_t>{2, 1, 8}));
  EXPECT_EQ(r.weights.sizes(), (std::vector<int64_t>{2, 1, 5}));
  EXPECT_TRUE(close(r.weights.sum(-1), at::ones({2, 1}), 1e-6, 0));
  EXPECT_TRUE((r.weights > 0).all().item<bool>());
}

TEST(Seed, AttnModuleHonoursOutputSize) {
  AttentionCombine attn(AttentionCombineOptions(8, 8, 8, 5));
  auto r = attn->forward(at::randn({2, 1, 8}), at::randn({2, 5, 8}), at::randn({2, 5, 8}));
  EXPECT_EQ(r.output.sizes(), (std::vector<int64_t>{2, 1, 5}));
}

// The notes' MyAttn state_dict (an OrderedDict from torch.save) loads, and the module gives the
// notes' outputs, weights and gradients.
class SeedMyAttn : public ::testing::TestWithParam<std::pair<std::string, int64_t>> {};

TEST_P(SeedMyAttn, MatchesPyTorch) {
  const auto [name, output_size] = GetParam();
  AttentionCombine attn(AttentionCombineOptions(8, 8, 8, output_size));
  io::LoadStateDictOptions options;
  options.renames = notes_attn_renames();
  io::load_state_dict(
      *attn, io::load_tensor_dict(testing::golden_path("notes_" + name + "_state.pt")), options);
  auto g = testing::with_prefix(golden("notes.pt"), name + "/");
  auto get = [&](const std::string& k) { return io::find(g, k, name); };
  auto q = get("q").clone().requires_grad_(), k = get("k").clone().requires_grad_(),
       v = get("v").clone().requires_grad_();
  auto r = attn->forward(q, k, v);
  EXPECT_TRUE(close(r.output, get("output")));
  EXPECT_TRUE(close(r.weights, get("weights")));
  ((r.output * get("r_out")).sum() + (r.weights * get("r_w")).sum()).backward();
  EXPECT_TRUE(close(q.grad(), get("grad.q")));
  EXPECT_TRUE(close(k.grad(), get("grad.k")));
  EXPECT_TRUE(close(v.grad(), get("grad.v")));
  auto params = attn->named_parameters();
  EXPECT_TRUE(close(params["attention.score.linear.weight"].grad(), get("grad.qk_linear.weight")));
  EXPECT_TRUE(close(params["attention.score.linear.bias"].grad(), get("grad.qk_linear.bias")));
  EXPECT_TRUE(close(params["qc_linear.weight"].grad(), get("grad.qc_linear.weight")));
  EXPECT_TRUE(close(params["qc_linear.bias"].grad(), get("grad.qc_linear.bias")));
}

INSTANTIATE_TEST_SUITE_P(Seed, SeedMyAttn,
                         ::testing::Values(std::make_pair(std::string("myattn"), int64_t{8}),
                                           std::make_pair(std::string("myattn_out5"), int64_t{5})),
                         [](const auto& info) { return info.param.first; });

}  // namespace
}  // namespace attnkit
