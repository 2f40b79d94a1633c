// Linear layers, embeddings, a weight's column blocks and padded batches to their real rows and
// back, against ATen and on any threads.

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
