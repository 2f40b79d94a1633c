// The fused (flash-style) attention kernel against the composite reference path:
// values, gradients (the composite's are checked by finite differences in test_gradcheck),
// masks, and rows with nothing to attend to.

#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>

#include "attnkit/attention/functional.h"
#include "attnkit/attention/mask.h"
#include "attnkit/core/info.h"
#include "attnkit/kernels/additive_score.h"
#include "attnkit/kernels/fused_attention.h"
#include "testing.h"

namespace attnkit {
namespace {

using testing::close;

struct Shape {
  int64_t n, tq, tk, d, dv;
  bool masked;
};
void PrintTo(const Shape& s, std::ostream* os) {
  *os << s.n << "x" << s.tq << "x" << s.tk << " d" << s.d << " dv" << s.dv
      << (s.masked ? " masked" : "");
}

class FusedAttention : public ::testing::TestWithParam<Shape> {};

TEST_P(FusedAttention, MatchesTheCompositePathInValuesAndGradients) {
  const auto s = GetParam();
  at::manual_seed(11);
  auto q = at::randn({s.n, s.tq, s.d}), k = at::randn({s.n, s.tk, s.d}),
       v = at::randn({s.n, s.tk, s.dv});
  at::Tensor mask;
  if (s.masked) {
    auto lengths = at::randint(1, s.tk + 1, {s.n});
    lengths[0] = s.tk;
    mask = padding_mask(lengths, s.tk);  // [N, 1, Tk]
    if (s.tq == s.tk) mask = mask.logical_and(causal_mask(s.tq, s.tk));
  }
  auto r = at::randn({s.n, s.tq, s.dv});
  auto fq = q.clone().requires_grad_(), fk = k.clone().requires_grad_(),
       fv = v.clone().requires_grad_();
  auto fused = kernels::fused_attention(fq, fk, fv, mask);
  (fused * r).sum().backward();
  // The reference, in double.
  auto dq = q.to(at::kDouble).requires_grad_(), dk = k.to(at::kDouble).requires_grad_(),
       dv = v.to(at::kDouble).requires_grad_();
  auto [reference, weights] = functional::scaled_dot_product_attention(dq, dk, dv, mask);
  (reference * r.to(at::kDouble)).sum().backward();
  EXPECT_TRUE(close(fused, reference, 2e-5, 1e-4)) << "output";
  EXPECT_TRUE(close(fq.grad(), dq.grad(), 5e-5, 1e-3)) << "grad q";
  EXPECT_TRUE(close(fk.grad(), dk.grad(), 5e-5, 1e-3)) << "grad k";
  EXPECT_TRUE(close(fv.grad(), dv.grad(), 5e-5, 1e-3)) << "grad v";
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, FusedAttention,
    // Up to 24 keys the short path (dot products on the rows as they lie), beyond it the blocks:
    // a Transformer batch's self-attention (causal and padded), cross-attention at the limit,
    // and one key past it.
    ::testing::Values(Shape{2, 5, 7, 4, 3, false}, Shape{8, 12, 12, 64, 64, true},
                      Shape{5, 9, 24, 16, 8, true}, Shape{3, 25, 25, 16, 16, true},
                      Shape{3, 70, 150, 16, 8, false}, Shape{3, 70, 150, 16, 8, true},
                      Shape{2, 130, 130, 32, 32, true}, Shape{1, 1, 300, 64, 64, true},
                      Shape{2, 300, 600, 16, 24, true}, Shape{2, 257, 257, 8, 8, true}));

// On both paths: 5 keys (short), 40 (blocks).
TEST(FusedAttentionMasks, FullyMaskedRowsGiveZerosNotNaN) {
  for (int64_t tk : {5, 40}) {
    auto q = at::randn({2, 3, 8}).requires_grad_(), k = at::randn({2, tk, 8}).requires_grad_(),
         v = at::randn({2, tk, 4}).requires_grad_();
    auto mask = padding_mask(at::tensor({tk, int64_t{0}}), tk);  // the second has no keys
    auto out = kernels::fused_attention(q, k, v, mask);
    EXPECT_TRUE(at::isfinite(out).all().item<bool>()) << tk;
    EXPECT_TRUE((out[1] == 0).all().item<bool>()) << tk;
    out.sum().backward();
    for (const auto& t : {q, k, v}) EXPECT_TRUE(at::isfinite(t.grad()).all().item<bool>()) << tk;
    EXPECT_TRUE((v.grad()[1] == 0).all().item<bool>()) << tk;
  }
}

// Rows are split between the kernels' threads; each row's result is its own, bit for bit.
TEST(FusedAttentionThreads, TheSplitChangesNoBit) {
  for (int64_t t : {12, 40}) {
    at::manual_seed(12);
    // Enough rows for two parts on either path (for_each_rows' estimate).
    const auto q = at::randn({256, t, 32}), k = at::randn({256, t, 32}),
               v = at::randn({256, t, 32}), g = at::randn({256, t, 32});
    const auto mask = causal_mask(t, t);  // [1, T, T]
    auto run = [&](int threads) {
      set_threads(threads, ThreadPolicy::Kernels);
      auto fq = q.clone().requires_grad_(), fk = k.clone().requires_grad_(),
           fv = v.clone().requires_grad_();
      auto out = kernels::fused_attention(fq, fk, fv, mask);
      auto grads = torch::autograd::grad({out}, {fq, fk, fv}, {g});
      grads.push_back(out);
      return grads;
    };
    const auto one = run(1), two = run(2);
    set_threads(1);
    for (size_t i = 0; i < one.size(); ++i) EXPECT_TRUE(at::equal(one[i], two[i])) << t << " " << i;
  }
}

TEST(FusedAttentionMasks, BadShapesAreNamed) {
  try {
    kernels::fused_attention(at::randn({2, 3, 8}), at::randn({2, 5, 7}), at::randn({2, 5, 4}));
    FAIL();
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what_without_backtrace()).find("[2, 5, 7]"), std::string::npos);
  }
}

}  // namespace
}  // namespace attnkit

namespace attnkit {
namespace {

// The fused additive score against the composite functional path: values and gradients.
// Tq = 1 is the decoder step, whose key gradient rows are each written by one score; zero
// upstream gradients (masked keys) must still leave zeros there.
TEST(FusedAdditiveScore, MatchesTheCompositePath) {
  for (int64_t tq : {4, 1})
    for (bool learned_v : {false, true}) {
      at::manual_seed(5);
      const int64_t n = 3, tk = 7, h = 21;  // h not a multiple of 8: the scalar tail runs
      auto q = at::randn({n, tq, h}), k = at::randn({n, tk, h}), v = at::randn({h});
      auto r = at::randn({n, tq, tk});
      r.index_put_({1, at::indexing::Slice(), at::indexing::Slice(4)}, 0);  // masked keys
      auto fq = q.clone().requires_grad_(), fk = k.clone().requires_grad_(),
           fv = v.clone().requires_grad_();
      auto fused = kernels::fused_additive_score(fq, fk, learned_v ? fv : at::Tensor());
      (fused * r).sum().backward();
      auto dq = q.to(at::kDouble).requires_grad_(), dk = k.to(at::kDouble).requires_grad_(),
           dv = v.to(at::kDouble).requires_grad_();
      // additive_score_projected(q, keys, weight, v) computes W_q q itself; an identity W_q makes
      // its query half exactly q.
      auto eye = at::eye(h, at::kDouble);
      auto reference =
          functional::additive_score_projected(dq, dk, eye, learned_v ? dv : at::Tensor());
      (reference * r.to(at::kDouble)).sum().backward();
      EXPECT_TRUE(close(fused, reference, 1e-5, 1e-5)) << "scores";
      EXPECT_TRUE(close(fq.grad(), dq.grad(), 1e-5, 1e-4)) << "grad q";
      EXPECT_TRUE(close(fk.grad(), dk.grad(), 1e-5, 1e-4)) << "grad k";
      if (learned_v) EXPECT_TRUE(close(fv.grad(), dv.grad(), 1e-4, 1e-4)) << "grad v";
    }
}

}  // namespace
}  // namespace attnkit
