// The whole-sequence training decoder (kernels/attention_decoder.h) against the step-by-step
// reference decoder and against finite differences.

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>

#include "attnkit/core/info.h"
#include "attnkit/kernels/blocks/attention_decoder.h"
#include "attnkit/rnn/model.h"
#include "attnkit/train/step.h"
#include "testing.h"

namespace attnkit {
namespace {

using testing::close;
using testing::gradcheck;

struct DecoderCase {
  ScoreKind score;
  bool input_feeding;
};

// The same model twice, one on the reference modules (torch::nn::GRU and the per-step decoder),
// one on the fused kernels, where teacher forcing runs the decoder as one node: logits, attention
// weights and every parameter's gradient must agree.
TEST(AttentionDecoder, MatchesTheStepByStepReferenceDecoder) {
  for (auto c : {DecoderCase{ScoreKind::Bahdanau, true}, DecoderCase{ScoreKind::Additive, true},
                 DecoderCase{ScoreKind::Bahdanau, false}}) {
    auto options = rnn::RnnOptions(11, 13)
                       .embed_size(6)
                       .hidden_size(8)
                       .score(c.score)
                       .input_feeding(c.input_feeding)
                       .dropout(0.0);  // the two paths draw dropout masks in different orders
    at::manual_seed(21);
    rnn::RnnModel reference(options.fused_kernels(false));
    rnn::RnnModel fused(options.fused_kernels(true));
    ASSERT_TRUE(fused->decoder->fuses_sequence());
    ASSERT_FALSE(reference->decoder->fuses_sequence());
    {
      at::NoGradGuard no_grad;
      auto from = reference->named_parameters();
      for (auto& p : fused->named_parameters()) p.value().copy_(from[p.key()]);
    }
    auto source = at::randint(1, 11, {3, 5}, at::kLong),
         target = at::randint(1, 13, {3, 4}, at::kLong);
    auto lengths = at::tensor({3, 5, 1}, at::kLong);  // padded rows: masked attention positions
    auto expected = reference->forward(source, lengths, target);
    auto actual = fused->forward(source, lengths, target);
    const std::string name =
        to_string(c.score) + (c.input_feeding ? " with" : " without") + " input feeding";
    EXPECT_TRUE(close(actual.logits, expected.logits)) << name;
    EXPECT_TRUE(close(actual.attention, expected.attention)) << name;
    EXPECT_TRUE(close(actual.attention.select(2, 1).select(0, 2), at::zeros({4}), 0, 0))
        << "a one-token source attends to nothing past it";
    auto g = at::randn_like(expected.logits), ga = at::randn_like(expected.attention);
    ((expected.logits * g).sum() + (expected.attention * ga).sum()).backward();
    ((actual.logits * g).sum() + (actual.attention * ga).sum()).backward();
    auto ref_params = reference->named_parameters();
    for (auto& p : fused->named_parameters()) {
      ASSERT_TRUE(p.value().grad().defined()) << p.key() << ", " << name;
      EXPECT_TRUE(close(p.value().grad(), ref_params[p.key()].grad(), 1e-5, 1e-4))
          << p.key() << ", " << name;
    }
  }
}

// A model small enough for exact comparisons, without dropout (the paths would draw different
// masks).
rnn::RnnOptions tiny_model(bool fused) {
  return rnn::RnnOptions(11, 13).embed_size(6).hidden_size(8).dropout(0.0).fused_kernels(fused);
}

// The encoder's GRU and the decoder split a batch's rows between the configured threads; each
// row's arithmetic is the same on any thread, so 1, 2 or 3 threads give bit-identical logits
// and gradients. 10 rows: the encoder packs its weight (from 8 rows on) and splits too.
TEST(AttentionDecoder, ThreadCountDoesNotChangeResults) {
  const int threads_before = at::get_num_threads();
  ScopedBlasThreads blas_on_the_caller(1);  // LibTorch's threads decide the parts
  std::vector<at::Tensor> first;
  for (int threads : {1, 2, 3}) {
    at::set_num_threads(threads);
    at::manual_seed(41);
    rnn::RnnModel model(tiny_model(true));
    auto source = at::randint(1, 11, {10, 5}, at::kLong);
    auto lengths = at::tensor({5, 2, 4, 5, 1, 3, 5, 2, 4, 3}, at::kLong);
    auto target = at::randint(1, 13, {10, 4}, at::kLong);
    auto out = model->forward(source, lengths, target);
    (out.logits * at::randn_like(out.logits)).sum().backward();
    std::vector<at::Tensor> results = {out.logits, out.attention};
    for (auto& p : model->parameters()) results.push_back(p.grad());
    if (first.empty()) {
      first = results;
      continue;
    }
    for (size_t i = 0; i < results.size(); ++i)
      EXPECT_TRUE(at::equal(results[i], first[i]))
          << "result " << i << ", " << threads << " threads";
  }
  at::set_num_threads(threads_before);
}

// Asking Seq2Seq::forward for the real tokens' logits only (as training does) gives those rows
// of the full logits and the same parameter gradients, on the fused sequence path, where the
// decoder stops each row early, and on the reference path.
TEST(AttentionDecoder, Seq2SeqLogitsForWantedPositionsOnly) {
  for (bool fused : {true, false}) {
    at::manual_seed(29);
    rnn::RnnModel model(tiny_model(fused));
    ASSERT_EQ(model->decoder->fuses_sequence(), fused);
    auto source = at::randint(1, 11, {3, 5}, at::kLong);
    auto lengths = at::tensor({5, 2, 4}, at::kLong);
    auto target = at::randint(1, 13, {3, 4}, at::kLong);
    target.index_put_({1, at::indexing::Slice(1)}, 0);  // row 1: one real token
    target.index_put_({2, 3}, 0);
    const auto real = target != 0;
    auto full = model->forward(source, lengths, target).logits;  // [3, 4, 13]
    const auto expected =
        full.reshape({-1, 13}).index_select(0, real.reshape(-1).nonzero().squeeze(1));
    auto g = at::randn_like(expected);
    auto expected_grads = torch::autograd::grad({(expected * g).sum()}, model->parameters(), {},
                                                false, false, /*allow_unused=*/true);
    auto actual = model->forward(source, lengths, target, 1.0, real).logits;  // [N, 13]
    ASSERT_EQ(actual.size(0), real.sum().item<int64_t>());
    EXPECT_TRUE(close(actual, expected)) << (fused ? "fused" : "reference");
    auto actual_grads = torch::autograd::grad({(actual * g).sum()}, model->parameters(), {}, false,
                                              false, /*allow_unused=*/true);
    for (size_t i = 0; i < actual_grads.size(); ++i) {
      if (!expected_grads[i].defined()) continue;  // e.g. the encoder bridge's unused rows
      EXPECT_TRUE(close(actual_grads[i], expected_grads[i], 1e-6, 1e-5))
          << "parameter " << i << (fused ? ", fused" : ", reference");
    }
  }
}

// Training's path: the output layer's input (Head::Features) through the layer fused with the
// loss gives the loss, and every parameter gradient, of the logits through sequence_loss.
TEST(AttentionDecoder, FeaturesThroughTheFusedLossMatchLogitsThroughTheLoss) {
  for (bool fused : {true, false}) {
    at::manual_seed(32);
    rnn::RnnModel model(tiny_model(fused));
    auto source = at::randint(1, 11, {3, 5}, at::kLong);
    auto lengths = at::tensor({5, 2, 4}, at::kLong);
    auto target_in = at::randint(1, 13, {3, 4}, at::kLong);
    auto target_out = at::randint(1, 13, {3, 4}, at::kLong);
    target_out.index_put_({1, at::indexing::Slice(2)}, 0);
    const auto real = target_out != 0;
    const auto wanted = target_out.masked_select(real);
    auto expected = train::sequence_loss(
        model->forward(source, lengths, target_in, 1.0, real).logits, wanted, 0.1);
    auto expected_grads = torch::autograd::grad({expected}, model->parameters(), {}, false, false,
                                                /*allow_unused=*/true);
    auto out = model->forward(source, lengths, target_in, 1.0, real, rnn::Head::Features);
    ASSERT_FALSE(out.logits.defined());
    auto actual = train::projected_loss(out.features, model->decoder->output->weight,
                                        model->decoder->output->bias, wanted, 0.1, fused);
    EXPECT_TRUE(close(actual, expected, 1e-6, 1e-5)) << (fused ? "fused" : "reference");
    auto actual_grads = torch::autograd::grad({actual}, model->parameters(), {}, false, false,
                                              /*allow_unused=*/true);
    for (size_t i = 0; i < actual_grads.size(); ++i) {
      if (!expected_grads[i].defined()) continue;
      EXPECT_TRUE(close(actual_grads[i], expected_grads[i], 1e-6, 1e-4))
          << "parameter " << i << (fused ? ", fused" : ", reference");
    }
  }
  rnn::RnnModel model(rnn::RnnOptions(11, 13).embed_size(6).hidden_size(8));
  EXPECT_THROW(model->forward(at::ones({1, 2}, at::kLong), at::tensor({2}, at::kLong),
                              at::ones({1, 2}, at::kLong), 0.5, {}, rnn::Head::Features),
               c10::Error);
}

struct Inputs {
  kernels::AttentionDecoderInputs in;
  std::vector<at::Tensor> differentiable;
};

Inputs random_inputs(bool bahdanau, bool feeding, at::ScalarType type) {
  const int64_t B = 3, T = 4, H = 3, A = 5, S = 4, Hm = 2;
  auto make = [&](std::vector<int64_t> shape, double scale = 1.0) {
    return (at::randn(shape, at::kDouble) * scale).to(type).requires_grad_();
  };
  Inputs r;
  auto& in = r.in;
  in.gates = make({B, T, 3 * H});
  in.h0 = make({B, H});
  if (feeding) in.w_feed = make({3 * H, H}, 0.5);
  in.w_hh = make({3 * H, H}, 0.5);
  in.b_hh = make({3 * H});
  in.w_query = make({A, H}, 0.5);
  in.keys = make({B, S, A});
  if (bahdanau) in.v = make({A});
  in.memory = make({B, S, Hm});
  // Row 1 attends to its first two positions only, row 2 to nothing: zero weights and context.
  in.keep =
      at::tensor({1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0}, at::kLong).to(at::kBool).view({B, 1, S});
  in.w_combine = make({H, H + Hm}, 0.5);
  in.b_combine = make({H});
  for (auto* t : {&in.gates, &in.h0, &in.w_feed, &in.w_hh, &in.b_hh, &in.w_query, &in.keys, &in.v,
                  &in.memory, &in.w_combine, &in.b_combine})
    if (t->defined()) r.differentiable.push_back(*t);
  return r;
}

TEST(AttentionDecoder, GradientsMatchFiniteDifferences) {
  for (bool bahdanau : {true, false})
    for (bool feeding : {true, false})
      for (bool lengths : {false, true}) {
        at::manual_seed(22);
        auto r = random_inputs(bahdanau, feeding, at::kDouble);
        // Unsorted, and a row that runs no step at all.
        if (lengths) r.in.lengths = at::tensor({2, 4, 0}, at::kLong);
        auto loss = [&] {
          auto out = kernels::attention_decoder(r.in);
          return testing::projection_loss(out.feeds, out.weights, 23);
        };
        EXPECT_TRUE(gradcheck(loss, r.differentiable))
            << (bahdanau ? "bahdanau" : "additive") << (feeding ? " with" : " without")
            << " input feeding" << (lengths ? ", lengths 2, 4, 0" : "");
      }
}

// Steps past a row's length are skipped, not just hidden: the outputs there are zero, and
// everything else (outputs, and every gradient of a loss that ignores those steps) equals the
// full run's.
TEST(AttentionDecoder, LengthsSkipStepsWithoutChangingTheRest) {
  at::manual_seed(27);
  auto r = random_inputs(true, true, at::kDouble);
  const auto lengths = at::tensor({3, 1, 4}, at::kLong);
  auto ran = (at::arange(4, at::kLong).unsqueeze(0) < lengths.unsqueeze(1)).to(at::kDouble);
  auto full = kernels::attention_decoder(r.in);
  auto loss = [&](const kernels::AttentionDecoderOutputs& out) {
    return testing::projection_loss(out.feeds * ran.unsqueeze(2), out.weights * ran.unsqueeze(2),
                                    28);
  };
  auto expected = torch::autograd::grad({loss(full)}, r.differentiable);
  r.in.lengths = lengths;
  auto skipped = kernels::attention_decoder(r.in);
  EXPECT_TRUE(close(skipped.feeds, full.feeds * ran.unsqueeze(2), 1e-12, 0));
  EXPECT_TRUE(close(skipped.weights, full.weights * ran.unsqueeze(2), 1e-12, 0));
  EXPECT_TRUE(close(skipped.feeds[1].narrow(0, 1, 3), at::zeros({3, 3}, at::kDouble), 0, 0));
  auto actual = torch::autograd::grad({loss(skipped)}, r.differentiable);
  for (size_t i = 0; i < actual.size(); ++i)
    EXPECT_TRUE(close(actual[i], expected[i], 1e-12, 1e-10)) << "input " << i;
}

TEST(AttentionDecoder, FullyMaskedRowHasZeroWeightsAndNoNaN) {
  at::manual_seed(24);
  auto r = random_inputs(true, true, at::kFloat);
  auto out = kernels::attention_decoder(r.in);
  EXPECT_TRUE(close(out.weights[2], at::zeros({4, 4}), 0, 0));
  EXPECT_TRUE(close(out.weights[1].sum(-1), at::ones({4}), 1e-6, 0)) << "weights sum to 1";
  EXPECT_TRUE(close(out.weights[1].narrow(1, 2, 2), at::zeros({4, 2}), 0, 0));
  testing::projection_loss(out.feeds, out.weights, 25).backward();
  for (const auto& t : r.differentiable) EXPECT_TRUE(t.grad().isfinite().all().item<bool>());
  EXPECT_TRUE(close(r.in.memory.grad()[2], at::zeros({4, 2}), 0, 0)) << "nothing attended";
  EXPECT_TRUE(close(r.in.keys.grad()[1].narrow(0, 2, 2), at::zeros({2, 5}), 0, 0));
}

TEST(AttentionDecoder, NoStepsAtAllGiveZerosAndZeroGradients) {
  at::manual_seed(30);
  auto r = random_inputs(true, true, at::kFloat);
  r.in.lengths = at::zeros({3}, at::kLong);
  auto out = kernels::attention_decoder(r.in);
  EXPECT_TRUE(close(out.feeds, at::zeros({3, 4, 3}), 0, 0));
  EXPECT_TRUE(close(out.weights, at::zeros({3, 4, 4}), 0, 0));
  testing::projection_loss(out.feeds, out.weights, 31).backward();
  for (const auto& t : r.differentiable)
    EXPECT_TRUE(close(t.grad(), at::zeros_like(t), 0, 0)) << t.sizes();
}

TEST(AttentionDecoder, FloatAgreesWithDouble) {
  at::manual_seed(26);
  auto r = random_inputs(true, true, at::kDouble);
  auto expected = kernels::attention_decoder(r.in);
  auto f = r.in;
  for (auto* t : {&f.gates, &f.h0, &f.w_feed, &f.w_hh, &f.b_hh, &f.w_query, &f.keys, &f.v,
                  &f.memory, &f.w_combine, &f.b_combine})
    *t = t->detach().to(at::kFloat);
  auto actual = kernels::attention_decoder(f);
  EXPECT_TRUE(close(actual.feeds.to(at::kDouble), expected.feeds, 1e-5, 1e-5));
  EXPECT_TRUE(close(actual.weights.to(at::kDouble), expected.weights, 1e-5, 1e-5));
}

TEST(AttentionDecoder, RejectsMismatchedShapesWithTheExpectedShape) {
  auto r = random_inputs(true, true, at::kFloat);
  r.in.w_combine = at::zeros({3, 4});
  try {
    kernels::attention_decoder(r.in);
    FAIL() << "expected an error";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("w_combine must be [3, 5]"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace attnkit
