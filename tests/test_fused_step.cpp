// FusedStep, the inference decoder step on raw buffers, against DecoderImpl::step (the
// reference), step by step and through the greedy and beam searches.

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>
#include <torch/optim/adam.h>

#include <limits>

#include "attnkit/core/info.h"
#include "attnkit/decoding/search.h"
#include "attnkit/kernels/ops/top_k.h"
#include "attnkit/rnn/fused_step.h"
#include "attnkit/rnn/search.h"
#include "attnkit/train/step.h"
#include "testing.h"

namespace attnkit {
namespace {

using rnn::RnnModel;
using rnn::RnnOptions;
using testing::close;

struct StepCase {
  ScoreKind score;
  int64_t layers;
  bool input_feeding;
};

RnnModel make_model(const StepCase& c) {
  at::manual_seed(21);
  RnnModel model(RnnOptions(17, 19)
                     .embed_size(10)
                     .hidden_size(16)
                     .layers(c.layers)
                     .score(c.score)
                     .input_feeding(c.input_feeding)
                     .dropout(0.3));
  model->eval();
  return model;
}

// 3 rows take the packed weights' wide blocks with the columns split between threads, 10 the
// packed weights with rows split between threads.
TEST(FusedStep, EveryStepMatchesTheReferenceStep) {
  for (const StepCase& c :
       {StepCase{ScoreKind::Bahdanau, 1, true}, StepCase{ScoreKind::Additive, 2, true},
        StepCase{ScoreKind::Bahdanau, 2, false}})
    for (int64_t rows : {3, 10}) {
      SCOPED_TRACE(to_string(c.score) + ", " + std::to_string(c.layers) + " layers, " +
                   std::to_string(rows) + " rows");
      auto model = make_model(c);
      ASSERT_TRUE(rnn::FusedStep::supports(model->decoder));
      c10::InferenceMode inference;
      auto source = at::randint(1, 17, {rows, 6}, at::kLong);
      auto lengths = at::randint(1, 7, {rows}, at::kLong);
      lengths[0] = 6;
      const auto encoded = model->encoder->forward(source, lengths);
      auto reference = model->decoder->start(encoded);
      rnn::FusedStep fused(model->decoder);
      auto state = fused.start(encoded);  // the keys on the packed weights
      EXPECT_TRUE(close(state.keys, reference.keys));
      // A row with nothing to attend to gets zero weights and context, never NaN.
      reference.mask = state.mask = state.mask.clone().index_put_({1}, false);
      auto tokens = at::randint(1, 19, {rows}, at::kLong);
      for (int t = 0; t < 4; ++t) {
        auto expected = model->decoder->step(tokens, reference);
        auto actual = fused.step(tokens, state);
        EXPECT_TRUE(close(actual.logits, expected.logits)) << "step " << t;
        EXPECT_TRUE(close(actual.attention, expected.attention)) << "step " << t;
        EXPECT_TRUE(close(actual.feed, expected.feed)) << "step " << t;
        EXPECT_TRUE(close(state.hidden, reference.hidden)) << "step " << t;
        EXPECT_EQ(actual.attention[1].abs().sum().item<float>(), 0.f);
        EXPECT_TRUE(at::isfinite(actual.logits).all().item<bool>());
        tokens = expected.logits.argmax(-1);
      }
    }
}

// Every product of the step is the packed panels' one sum per element, whatever the rows: a row
// gives the same bits alone as in a batch (one OpenBLAS GEMV per row below 8 rows, as it once
// was, did not).
TEST(FusedStep, ARowGivesTheSameBitsAloneAsInABatch) {
  auto model = make_model(StepCase{ScoreKind::Bahdanau, 2, true});
  c10::InferenceMode inference;
  auto source = at::randint(1, 17, {10, 6}, at::kLong);
  auto lengths = at::full({10}, 6, at::kLong);
  auto batch = model->decoder->start(model->encoder->forward(source, lengths));
  auto alone = batch.select(at::zeros({1}, at::kLong));  // row 0, from the same encoder pass
  rnn::FusedStep fused(model->decoder);
  auto tokens = at::randint(1, 19, {10}, at::kLong);
  for (int t = 0; t < 4; ++t) {
    auto in_batch = fused.step(tokens, batch);
    auto by_itself = fused.step(tokens.narrow(0, 0, 1), alone);
    EXPECT_TRUE(at::equal(by_itself.logits, in_batch.logits.narrow(0, 0, 1))) << "step " << t;
    EXPECT_TRUE(at::equal(alone.hidden, batch.hidden.narrow(-2, 0, 1))) << "step " << t;
    tokens = in_batch.logits.argmax(-1);
  }
}

// A beam search's rows read their sentence's source fields through source_row, one copy per
// sentence that reorders leave alone: the same bits as a copy per row, also after the beams
// were reordered and a sentence left.
TEST(FusedStep, BeamsReadTheirSentencesSourceAsACopyPerRow) {
  auto model = make_model(StepCase{ScoreKind::Bahdanau, 2, true});
  c10::InferenceMode inference;
  auto source = at::randint(1, 17, {3, 6}, at::kLong);
  auto lengths = at::tensor({6, 2, 4}, at::kLong);
  rnn::FusedStep fused(model->decoder);
  auto shared = fused.start(model->encoder->forward(source, lengths));
  ASSERT_TRUE(shared.source_row.defined());
  auto per_row = shared;
  per_row.source_row = at::Tensor();
  // 3 sentences of 2 beams, then beams swapped within sentences, then sentence 1 gone.
  const std::vector<at::Tensor> origins = {at::tensor({0, 0, 1, 1, 2, 2}, at::kLong),
                                           at::tensor({1, 0, 2, 3, 5, 4}, at::kLong),
                                           at::tensor({0, 1, 4, 5}, at::kLong)};
  auto tokens = at::full({3}, 4, at::kLong);
  for (size_t t = 0; t < origins.size(); ++t) {
    shared = shared.reorder_beams(origins[t], at::Tensor());
    per_row = per_row.reorder_beams(origins[t], /*source_rows=*/origins[t]);
    tokens = tokens.index_select(0, origins[t]);
    EXPECT_EQ(shared.memory.size(0), 3) << "the sentences' copy stays as it was";
    EXPECT_EQ(per_row.memory.size(0), origins[t].size(0));
    auto a = fused.step(tokens, shared), b = fused.step(tokens, per_row);
    EXPECT_TRUE(at::equal(a.logits, b.logits)) << "step " << t;
    EXPECT_TRUE(at::equal(a.attention, b.attention)) << "step " << t;
    EXPECT_TRUE(at::equal(shared.hidden, per_row.hidden)) << "step " << t;
    tokens = a.logits.argmax(-1);
  }
}

// A beam search's step at batch 32 has enough rows for the kernels' threads to share its
// per-row work (the gates, the attention rows, the combine's tanh) as well as its products: the
// same bits on one thread and two. 128 rows of 256 units, 12 source positions: every one of
// those loops is split.
TEST(FusedStep, RowsSplitBetweenThreadsGiveTheSameBits) {
  at::manual_seed(25);
  RnnModel model(RnnOptions(17, 19).embed_size(32).hidden_size(256).layers(2));
  model->eval();
  c10::InferenceMode inference;
  const int64_t rows = 128;
  auto source = at::randint(1, 17, {rows, 12}, at::kLong);
  auto lengths = at::randint(1, 13, {rows}, at::kLong);
  const auto encoded = model->encoder->forward(source, lengths);
  rnn::FusedStep fused(model->decoder);
  auto run = [&](int threads) {
    set_threads(threads, ThreadPolicy::Kernels);
    auto state = fused.start(encoded);
    auto tokens = at::full({rows}, 3, at::kLong);
    std::vector<at::Tensor> outputs;
    for (int t = 0; t < 3; ++t) {
      auto out = fused.step(tokens, state);
      outputs.insert(outputs.end(), {out.logits, out.attention, out.feed, state.hidden.clone()});
      tokens = out.logits.argmax(-1);
    }
    return outputs;
  };
  const auto one = run(1), two = run(2);
  set_threads(1);
  for (size_t i = 0; i < one.size(); ++i)
    EXPECT_TRUE(at::equal(one[i], two[i])) << "step " << i / 4 << ", output " << i % 4;
}

// The first layer's embedding projection and the packed weights are cached per decoder: training
// or loading weights in place must rebuild them, and another model must not see them. 9 rows:
// the packed weights are used.
TEST(FusedStep, PreparedWeightsFollowWeightChanges) {
  auto model = make_model({ScoreKind::Bahdanau, 1, true});
  auto source = at::randint(1, 17, {9, 5}, at::kLong);
  auto lengths = at::tensor({5, 3, 5, 1, 2, 4, 5, 3, 2}, at::kLong);
  auto tokens = at::tensor({4, 7, 1, 2, 3, 5, 6, 8, 9}, at::kLong);
  auto matches_reference = [&](RnnModel& m) {
    c10::InferenceMode inference;
    auto state = m->decoder->start(m->encoder->forward(source, lengths));
    auto reference = state;
    rnn::FusedStep fused(m->decoder);
    return close(fused.step(tokens, state).logits, m->decoder->step(tokens, reference).logits);
  };
  EXPECT_TRUE(matches_reference(model));
  {
    at::NoGradGuard no_grad;
    model->decoder->embedding->weight.add_(0.5);
  }
  EXPECT_TRUE(matches_reference(model)) << "after an in-place change of the embedding";
  {
    at::NoGradGuard no_grad;
    model->decoder->gru->all_weights()[0].mul_(1.5);
  }
  EXPECT_TRUE(matches_reference(model)) << "after an in-place change of W_ih";
  {
    at::NoGradGuard no_grad;
    model->decoder->output->weight.mul_(-1);
  }
  EXPECT_TRUE(matches_reference(model)) << "after an in-place change of the output layer";
  {  // training's fused Adam writes through the parameters' buffers
    torch::optim::Adam optimizer(model->parameters(), torch::optim::AdamOptions(0.1));
    for (auto& p : model->parameters()) p.mutable_grad() = at::randn_like(p);
    train::adam_step(optimizer);
  }
  EXPECT_TRUE(matches_reference(model)) << "after a training step";
  auto other = make_model({ScoreKind::Bahdanau, 1, true});  // the original weights again
  EXPECT_TRUE(matches_reference(other));
  EXPECT_TRUE(matches_reference(model));
}

TEST(FusedStep, SearchesGiveTheReferenceTranslations) {
  auto model = make_model({ScoreKind::Bahdanau, 1, true});
  auto source = at::randint(1, 17, {4, 5}, at::kLong);
  auto lengths = at::tensor({5, 3, 1, 4}, at::kLong);
  for (int64_t beam : {1, 3}) {
    decoding::SearchOptions o;
    o.beam_size = beam;
    o.nbest = beam;
    o.fused = false;
    auto expected = rnn::search(model, source, lengths, o);
    o.fused = true;
    auto actual = rnn::search(model, source, lengths, o);
    ASSERT_EQ(actual.size(), expected.size());
    for (size_t b = 0; b < expected.size(); ++b) {
      ASSERT_EQ(actual[b].size(), expected[b].size()) << "beam " << beam;
      for (size_t h = 0; h < expected[b].size(); ++h) {
        EXPECT_EQ(actual[b][h].tokens, expected[b][h].tokens)
            << "beam " << beam << ", sentence " << b;
        EXPECT_NEAR(actual[b][h].score, expected[b][h].score, 1e-4);
        EXPECT_TRUE(close(actual[b][h].attention, expected[b][h].attention));
      }
    }
  }
}

// The beam's candidate ranking against the composite it replaced: log-softmax, add the beam
// scores in double, top-k over all k x V extensions.
TEST(BeamCandidates, EqualTheTopKOverAllExtensions) {
  at::manual_seed(23);
  const int64_t k = 4, V = 301, want = 8;
  for (int trial = 0; trial < 20; ++trial) {
    auto logits = (at::randn({k, V}) * 3).contiguous();
    auto scores = at::randn({k}, at::kDouble) * 2;
    if (trial % 3 == 0) scores[2] = -std::numeric_limits<double>::infinity();  // a dead beam
    std::vector<double> beam_scores(scores.data_ptr<double>(), scores.data_ptr<double>() + k);
    auto actual =
        kernels::best_extensions(logits.data_ptr<float>(), k, V, beam_scores.data(), want);
    auto total = (scores.unsqueeze(1) + at::log_softmax(logits, -1).to(at::kDouble)).view({-1});
    auto [top, index] = total.topk(want);
    ASSERT_EQ(static_cast<int64_t>(actual.size()), want);
    for (int64_t c = 0; c < want; ++c) {
      EXPECT_NEAR(actual[c].score, top[c].item<double>(), 1e-5) << "trial " << trial;
      EXPECT_EQ(actual[c].beam * V + actual[c].token, index[c].item<int64_t>())
          << "trial " << trial;
    }
  }
}

// Logits with many equal values: the cut keeps the lower beam, then the lower token id, as the
// header promises; checked against sorting every extension by (score, beam, token).
TEST(BeamCandidates, TiesGoToTheLowerBeamThenTheLowerToken) {
  at::manual_seed(26);
  const int64_t k = 3, V = 200, want = 6;
  for (int trial = 0; trial < 20; ++trial) {
    auto logits = at::randint(-3, 2, {k, V}).to(at::kFloat).contiguous();  // five values
    // Larger logits late in a row, after the equal ones at the cut filled the places.
    if (trial % 4 < 2) logits.narrow(1, V - 1 - trial % 3, 1 + trial % 3).fill_(3.f);
    std::vector<double> beam_scores = {0.0, trial % 2 ? 0.0 : -0.5, -1.0};
    auto lse = at::logsumexp(logits, -1).to(at::kDouble);
    std::vector<kernels::Candidate> all;
    for (int64_t i = 0; i < k; ++i)
      for (int64_t j = 0; j < V; ++j)
        all.push_back({beam_scores[i] + logits[i][j].item<double>() - lse[i].item<double>(), i, j});
    std::stable_sort(all.begin(), all.end(),
                     [](const auto& a, const auto& b) { return a.score > b.score + 1e-9; });
    auto actual =
        kernels::best_extensions(logits.data_ptr<float>(), k, V, beam_scores.data(), want);
    ASSERT_EQ(static_cast<int64_t>(actual.size()), want);
    for (int64_t c = 0; c < want; ++c) {
      EXPECT_EQ(actual[c].beam, all[c].beam) << "trial " << trial << ", candidate " << c;
      EXPECT_EQ(actual[c].token, all[c].token) << "trial " << trial << ", candidate " << c;
      EXPECT_NEAR(actual[c].score, all[c].score, 1e-5);
    }
  }
}

// A step's sentences ranked at once, split between threads, are each ranked as alone: the same
// candidates and the same score bits on one thread and two.
TEST(BeamCandidates, SentencesRankedTogetherAsAloneOnAnyThreads) {
  at::manual_seed(24);
  const int64_t sentences = 37, k = 5, V = 1003, want = 10;  // 37 * 5 * 1003: parts of 64 Ki
  auto logits = (at::randn({sentences * k, V}) * 4).contiguous();
  auto scores = (at::randn({sentences * k}, at::kDouble) * 3).contiguous();
  scores[7] = -std::numeric_limits<double>::infinity();  // a dead beam
  const float* x = logits.data_ptr<float>();
  const double* s = scores.data_ptr<double>();
  for (int threads : {1, 2}) {
    set_threads(threads, ThreadPolicy::Kernels);
    const auto together = kernels::best_extensions(x, sentences, k, V, s, want);
    ASSERT_EQ(static_cast<int64_t>(together.size()), sentences);
    for (int64_t i = 0; i < sentences; ++i) {
      const auto alone = kernels::best_extensions(x + i * k * V, k, V, s + i * k, want);
      ASSERT_EQ(together[i].size(), alone.size()) << "sentence " << i << ", " << threads;
      for (size_t c = 0; c < alone.size(); ++c) {
        EXPECT_EQ(together[i][c].score, alone[c].score) << "sentence " << i << ", " << threads;
        EXPECT_EQ(together[i][c].beam, alone[c].beam);
        EXPECT_EQ(together[i][c].token, alone[c].token);
      }
    }
  }
  set_threads(1);
}

TEST(FusedStep, OtherConfigurationsKeepTheReferenceStep) {
  at::manual_seed(22);
  for (auto model :
       {RnnModel(RnnOptions(5, 5)
                     .score(ScoreKind::ScaledDot)
                     .hidden_size(8)
                     .embed_size(4)
                     .bidirectional(false)),
        RnnModel(RnnOptions(5, 5).weighting(WeightingKind::Hard).hidden_size(8).embed_size(4)),
        RnnModel(RnnOptions(5, 5).attention(false).hidden_size(8).embed_size(4))})
    EXPECT_FALSE(rnn::FusedStep::supports(model->decoder));
}

}  // namespace
}  // namespace attnkit
