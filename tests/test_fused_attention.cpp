// The fused (flash-style) attention kernel against the composite reference path:
// values, gradients (the composite's are checked by finite differences in test_gradcheck),
// masks, and rows with nothing to attend to.

#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>

#include "attnkit/attention/functional.h"
#include "attnkit/attention/mask.h"
#include "attnkit/core/info.h"
#include "attnkit/kernels/cpu/cpu_isa.h"
#include "attnkit/kernels/ops/additive_score.h"
#include "attnkit/kernels/ops/fused_attention.h"
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
  // The reference, in double.
  auto dq = q.to(at::kDouble).requires_grad_(), dk = k.to(at::kDouble).requires_grad_(),
       dv = v.to(at::kDouble).requires_grad_();
  auto [reference, weights] = functional::scaled_dot_product_attention(dq, dk, dv, mask);
  (reference * r.to(at::kDouble)).sum().backward();
  // Every ISA's path: the short rows have their own on AVX-512 (d = dv, a multiple of 16).
  for (kernels::Isa isa : kernels::supported_isas()) {
    kernels::ScopedIsa scope(isa);
    SCOPED_TRACE(to_string(isa));
    auto fq = q.clone().requires_grad_(), fk = k.clone().requires_grad_(),
         fv = v.clone().requires_grad_();
    auto fused = kernels::fused_attention(fq, fk, fv, mask);
    (fused * r).sum().backward();
    EXPECT_TRUE(close(fused, reference, 2e-5, 1e-4)) << "output";
    EXPECT_TRUE(close(fq.grad(), dq.grad(), 5e-5, 1e-3)) << "grad q";
    EXPECT_TRUE(close(fk.grad(), dk.grad(), 5e-5, 1e-3)) << "grad k";
    EXPECT_TRUE(close(fv.grad(), dv.grad(), 5e-5, 1e-3)) << "grad v";
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, FusedAttention,
    // Up to 24 keys the short path (dot products on the rows as they lie), beyond it the blocks:
    // a Transformer batch's self-attention (causal and padded), cross-attention at the limit,
    // and one key past it.
    // d = dv = 16 and 64 take the AVX-512 rows where the CPU has them, 4 / 3 and 16 / 8 not.
    ::testing::Values(Shape{2, 5, 7, 4, 3, false}, Shape{8, 12, 12, 64, 64, true},
                      Shape{5, 9, 24, 16, 8, true}, Shape{4, 7, 24, 16, 16, true},
                      Shape{3, 6, 11, 128, 128, false}, Shape{3, 25, 25, 16, 16, true},
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

// Multi-head attention on the projections as they lie. Self: one [B, T, 3E] input; cross:
// [B, Tq, E] and [B, Tk, 2E]. Short rows (12 keys) and blocks (40), padded and causal masks.
struct Heads {
  int64_t b, tq, tk, heads, d;
  bool self;
};
void PrintTo(const Heads& h, std::ostream* os) {
  *os << (h.self ? "self " : "cross ") << h.b << "x" << h.tq << "x" << h.tk << " H" << h.heads
      << " d" << h.d;
}

class FusedMultihead : public ::testing::TestWithParam<Heads> {};

// [B, T, C] columns col .. col + E as [B, H, T, d].
at::Tensor split(const at::Tensor& x, int64_t col, int64_t heads, int64_t d) {
  return x.narrow(2, col, heads * d).view({x.size(0), x.size(1), heads, d}).transpose(1, 2);
}

TEST_P(FusedMultihead, MatchesTheCompositeAndFusedAttentionOnSplitHeads) {
  const auto h = GetParam();
  const int64_t e = h.heads * h.d;
  at::manual_seed(13);
  auto q = at::randn({h.b, h.tq, h.self ? 3 * e : e}), kv = at::randn({h.b, h.tk, 2 * e});
  auto lengths = at::randint(1, h.tk + 1, {h.b});
  lengths[0] = h.tk;
  auto mask = padding_mask(lengths, h.tk);  // [B, 1, Tk]
  if (h.self) mask = mask.logical_and(causal_mask(h.tq, h.tk));
  const auto& keys = h.self ? q : kv;
  const int64_t k_col = h.self ? e : 0, v_col = h.self ? 2 * e : e;
  auto g = at::randn({h.b, h.tq, e});

  auto fq = q.clone().requires_grad_(), fkv = kv.clone().requires_grad_();
  auto fused = kernels::fused_multihead_attention(fq, h.self ? at::Tensor() : fkv, h.heads, mask);
  ASSERT_EQ(fused.sizes(), (std::vector<int64_t>{h.b, h.tq, e}));
  auto grads = torch::autograd::grad(
      {fused}, h.self ? std::vector<at::Tensor>{fq} : std::vector<at::Tensor>{fq, fkv}, {g});

  // The composite on split heads, in double.
  auto dq = q.to(at::kDouble).requires_grad_(), dkv = kv.to(at::kDouble).requires_grad_();
  const auto& dkeys = h.self ? dq : dkv;
  auto [reference, weights] = functional::scaled_dot_product_attention(
      split(dq, 0, h.heads, h.d), split(dkeys, k_col, h.heads, h.d),
      split(dkeys, v_col, h.heads, h.d), mask.unsqueeze(1));
  auto merged = reference.transpose(1, 2).reshape({h.b, h.tq, e});
  auto ref_grads = torch::autograd::grad(
      {merged}, h.self ? std::vector<at::Tensor>{dq} : std::vector<at::Tensor>{dq, dkv},
      {g.to(at::kDouble)});
  EXPECT_TRUE(close(fused, merged, 2e-5, 1e-4)) << "output";
  for (size_t i = 0; i < grads.size(); ++i)
    EXPECT_TRUE(close(grads[i], ref_grads[i], 5e-5, 1e-3)) << "gradient " << i;

  // fused_attention on the same heads split into [B H, T, d] copies: the same kernel row for
  // row, so the same bits.
  auto rows = [&](const at::Tensor& x, int64_t col) {
    return split(x, col, h.heads, h.d).reshape({h.b * h.heads, x.size(1), h.d});
  };
  auto rq = rows(q, 0).requires_grad_(), rk = rows(keys, k_col).requires_grad_(),
       rv = rows(keys, v_col).requires_grad_();
  auto row_mask =
      mask.unsqueeze(1).expand({h.b, h.heads, h.tq, h.tk}).reshape({h.b * h.heads, h.tq, h.tk});
  auto by_rows = kernels::fused_attention(rq, rk, rv, row_mask);
  auto row_grads = torch::autograd::grad(
      {by_rows}, {rq, rk, rv},
      {g.view({h.b, h.tq, h.heads, h.d}).transpose(1, 2).reshape({h.b * h.heads, h.tq, h.d})});
  auto unsplit = [&](const at::Tensor& x, int64_t t) {  // [B H, T, d] -> [B, T, E]
    return x.view({h.b, h.heads, t, h.d}).transpose(1, 2).reshape({h.b, t, e});
  };
  EXPECT_TRUE(at::equal(fused, unsplit(by_rows, h.tq)));
  const auto gq = grads[0], gkv = h.self ? grads[0] : grads[1];
  EXPECT_TRUE(at::equal(gq.narrow(2, 0, e), unsplit(row_grads[0], h.tq)));
  EXPECT_TRUE(at::equal(gkv.narrow(2, k_col, e), unsplit(row_grads[1], h.tk)));
  EXPECT_TRUE(at::equal(gkv.narrow(2, v_col, e), unsplit(row_grads[2], h.tk)));
}

INSTANTIATE_TEST_SUITE_P(Layouts, FusedMultihead,
                         ::testing::Values(Heads{3, 12, 12, 4, 16, true},
                                           Heads{3, 10, 12, 4, 16, false},
                                           Heads{2, 40, 40, 2, 16, true},
                                           Heads{2, 7, 40, 2, 16, false}));

TEST(FusedMultihead, BadShapesAreNamed) {
  try {
    kernels::fused_multihead_attention(at::randn({2, 3, 30}), {}, 4);  // 3E = 30: E = 10, 4 heads
    FAIL();
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what_without_backtrace()).find("[2, 3, 30]"), std::string::npos);
  }
  EXPECT_THROW(kernels::fused_multihead_attention(at::randn({2, 3, 8}), at::randn({2, 5, 12}), 2),
               c10::Error);  // KV must be [B, Tk, 2E] = 16 wide
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
