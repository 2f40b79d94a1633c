// The Transformer (transformer/layers.h, transformer/model.h) against PyTorch: torch.nn.Transformer
// with its state_dict loaded unchanged, and attnkit's translation model mirrored in Python
// (scripts/attnkit_reference.py), outputs and every gradient; then incremental decoding against
// the full causal pass. Fixtures: scripts/make_golden.py transformer.

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "attnkit/attention/mask.h"
#include "attnkit/attention/self_attention.h"
#include "attnkit/core/error.h"
#include "attnkit/core/info.h"
#include "attnkit/io/state_dict.h"
#include "attnkit/transformer/model.h"
#include "testing.h"

namespace attnkit {
namespace {

using testing::close;
using transformer::Activation;
using transformer::LayerOptions;
using transformer::StepPath;
using transformer::TransformerModel;
using transformer::TransformerOptions;

struct NnCase {
  const char* name;
  bool norm_first;
  Activation activation;
};

class TorchNnTransformer : public ::testing::TestWithParam<NnCase> {};

TEST_P(TorchNnTransformer, OutputsAndEveryGradientMatchPyTorch) {
  const auto& c = GetParam();
  const auto g =
      testing::with_prefix(testing::golden("transformer.pt"), std::string("nn/") + c.name + "/");
  auto get = [&](const std::string& key) { return io::find(g, key, c.name); };
  transformer::Transformer model(LayerOptions(8, 2)
                                     .dim_feedforward(16)
                                     .dropout(0)
                                     .attention_dropout(0)
                                     .ffn_dropout(0)
                                     .activation(c.activation)
                                     .norm_first(c.norm_first),
                                 /*encoder_layers=*/2, /*decoder_layers=*/2);
  io::load_state_dict(*model, testing::with_prefix(g, "param."));  // unchanged names

  auto src = get("src").clone().requires_grad_(), tgt = get("tgt").clone().requires_grad_();
  const auto padding = padding_mask(get("lengths"), src.size(1));  // [B, 1, S]
  auto out = model->forward(src, tgt, padding, causal_mask(tgt.size(1), tgt.size(1)), padding);
  EXPECT_TRUE(close(out, get("output")));
  (out * get("r_out")).sum().backward();
  EXPECT_TRUE(close(src.grad(), get("grad.src")));
  EXPECT_TRUE(close(tgt.grad(), get("grad.tgt")));
  for (const auto& p : model->named_parameters())
    EXPECT_TRUE(close(p.value().grad(), get("grad." + p.key()))) << p.key();
}

INSTANTIATE_TEST_SUITE_P(Golden, TorchNnTransformer,
                         ::testing::Values(NnCase{"prenorm_relu", true, Activation::Relu},
                                           NnCase{"postnorm_relu", false, Activation::Relu},
                                           NnCase{"prenorm_gelu", true, Activation::Gelu}),
                         [](const auto& info) { return std::string(info.param.name); });

// need_weights = false takes the fused attention kernel over the B x H rows; it gives the
// composite's outputs and gradients, with padding and causal masks, self- and cross-attention.
TEST(MultiheadAttention, WithoutWeightsTheFusedKernelMatchesTheComposite) {
  at::manual_seed(8);
  MultiheadAttention mha(MultiheadAttentionOptions(8, 2));
  const auto lengths = at::tensor({5, 2, 4}, at::kLong);
  const auto x = at::randn({3, 5, 8}), memory = at::randn({3, 4, 8});
  const auto causal = padding_mask(lengths, 5).logical_and(causal_mask(5, 5));
  const auto cross = padding_mask(at::tensor({4, 1, 3}, at::kLong), 4);
  for (bool self : {true, false}) {
    std::vector<at::Tensor> outputs, grads;
    for (bool need_weights : {true, false}) {
      mha->zero_grad();
      auto q = x.clone().requires_grad_();
      auto kv = self ? q : memory.clone().requires_grad_();
      auto out = mha->forward(q, kv, kv, self ? causal : cross, need_weights);
      EXPECT_EQ(out.weights.defined(), need_weights);
      (out.output * at::linspace(-1, 1, out.output.numel()).view_as(out.output)).sum().backward();
      outputs.push_back(out.output.detach());
      grads.push_back(q.grad());
      for (const auto& p : mha->parameters()) grads.push_back(p.grad().clone());
    }
    EXPECT_TRUE(close(outputs[1], outputs[0])) << (self ? "self" : "cross");
    const size_t n = grads.size() / 2;
    for (size_t i = 0; i < n; ++i)
      EXPECT_TRUE(close(grads[n + i], grads[i])) << (self ? "self" : "cross") << " grad " << i;
  }
}

TransformerOptions tiny(bool norm_first = true) {
  return TransformerOptions(11, 13)
      .d_model(8)
      .heads(2)
      .encoder_layers(2)
      .decoder_layers(2)
      .ffn(16)
      .dropout(0)
      .attention_dropout(0)
      .ffn_dropout(0)
      .norm_first(norm_first);
}

TEST(TransformerModel, LogitsAndEveryGradientMatchTheReferenceModel) {
  const auto g = testing::with_prefix(testing::golden("transformer.pt"), "model/");
  auto get = [&](const std::string& key) { return io::find(g, key, "model"); };
  TransformerModel model(tiny());
  io::load_state_dict(*model, testing::with_prefix(g, "param."));
  auto encoded = model->encode(get("source"), get("lengths"));
  auto logits = model->project(model->decode(get("target_in"), encoded));
  EXPECT_TRUE(close(logits, get("logits")));
  (logits * get("r_out")).sum().backward();
  // The tied target embedding's gradient holds the output layer's share too.
  for (const auto& p : model->named_parameters())
    EXPECT_TRUE(close(p.value().grad(), get("grad." + p.key()))) << p.key();
}

// Training's decoder on the real target positions only (kernels/ragged.h) gives the padded
// pass's real rows and the same gradient for every parameter: pre- and post-norm, float32 on
// the fused attention and double on the composite, empty and full sequences.
TEST(TransformerModel, RaggedDecodingEqualsThePaddedPassOnTheRealRows) {
  for (auto dtype : {at::kFloat, at::kDouble})
    for (bool norm_first : {true, false}) {
      SCOPED_TRACE(std::string(dtype == at::kFloat ? "float" : "double") +
                   (norm_first ? " pre-norm" : " post-norm"));
      at::manual_seed(9);
      TransformerModel model(tiny(norm_first));
      model->to(dtype);
      model->train();
      auto source = at::randint(4, 11, {4, 6}, at::kLong);
      const auto lengths = at::tensor({6, 3, 5, 2}, at::kLong);
      source.masked_fill_(padding_mask(lengths, 6).squeeze(1).logical_not(), 0);
      const auto target = at::randint(4, 13, {4, 7}, at::kLong);
      const auto real =
          at::arange(7, at::kLong).unsqueeze(0) < at::tensor({7, 1, 4, 0}, at::kLong).unsqueeze(1);
      const auto ragged = kernels::Ragged::from_mask(real);
      const auto r = at::randn({ragged.rows(), 8}, at::TensorOptions(dtype));
      std::vector<at::Tensor> features, grads;
      for (bool skip_padding : {false, true}) {
        model->zero_grad();
        const auto encoded = model->encode(source, lengths);
        auto f = skip_padding ? model->decode(target, encoded, nullptr, &ragged)
                              : model->decode(target, encoded)
                                    .reshape({-1, 8})
                                    .index_select(0, real.reshape(-1).nonzero().squeeze(1));
        (f * r).sum().backward();
        features.push_back(f.detach());
        for (const auto& p : model->parameters())  // the output bias has none: no projection
          grads.push_back(p.grad().defined() ? p.grad().clone() : at::zeros_like(p));
      }
      EXPECT_TRUE(close(features[1], features[0]));
      const size_t n = grads.size() / 2;
      for (size_t i = 0; i < n; ++i)
        EXPECT_TRUE(close(grads[n + i], grads[i])) << "parameter " << i;
    }
}

// Incremental decoding (cached keys and values, one position a step) gives the logits of the
// full causal pass at every position, for a batch with padding, pre- and post-norm, ReLU and
// GELU: the fused step, the composite step on packed weights and the reference products. Heads
// of 4 take the vector loops' scalar tails, heads of 32 their vector bodies.
class IncrementalDecoding : public ::testing::TestWithParam<bool> {};

TEST_P(IncrementalDecoding, EqualsTheFullCausalPass) {
  for (auto [activation, d_model] : {std::pair{Activation::Relu, 8},
                                     {Activation::Gelu, 8},
                                     {Activation::Relu, 64},
                                     {Activation::Gelu, 64}}) {
    SCOPED_TRACE(to_string(activation) + ", d_model " + std::to_string(d_model));
    at::manual_seed(5);
    TransformerModel model(tiny(GetParam()).activation(activation).d_model(d_model));
    model->eval();
    auto source = at::randint(4, 11, {3, 6}, at::kLong);
    const auto lengths = at::tensor({6, 2, 4}, at::kLong);
    source.masked_fill_(padding_mask(lengths, 6).squeeze(1).logical_not(), 0);
    auto target = at::randint(4, 13, {3, 7}, at::kLong);
    at::NoGradGuard no_grad;
    const auto encoded = model->encode(source, lengths);
    transformer::AttentionMaps maps;
    const auto full = model->project(model->decode(target, encoded, &maps));  // [B, T, V]
    // What the search keeps: the penultimate layer's cross-attention (layer 0 of these 2),
    // averaged over its heads.
    ASSERT_EQ(transformer::alignment_layer(2), 0);
    const auto alignment = maps.cross[0].mean(1);  // [B, T, S]
    // The encoder on packed weights (kernels/packed_linear.h), as translation runs it.
    const auto packed = model->encode(source, lengths, /*maps=*/nullptr, /*packed=*/true);
    EXPECT_TRUE(close(packed.memory, encoded.memory));
    auto state = model->start(encoded);  // the fused step
    auto composite = model->start(encoded, StepPath::Packed);
    auto reference = model->start(encoded, StepPath::Reference);
    ASSERT_TRUE(state.fused && composite.packed && !composite.fused && !reference.packed);
    for (int64_t t = 0; t < target.size(1); ++t) {
      at::Tensor attention, composite_attention;
      const auto logits = model->step(target.select(1, t), state, &attention);
      EXPECT_TRUE(close(logits, full.select(1, t))) << "position " << t;
      EXPECT_TRUE(close(model->step(target.select(1, t), composite, &composite_attention), logits))
          << "position " << t;
      EXPECT_TRUE(close(attention, composite_attention)) << "position " << t;
      EXPECT_TRUE(close(attention, alignment.select(1, t))) << "position " << t;
      EXPECT_TRUE(close(model->step(target.select(1, t), reference), logits)) << "position " << t;
      // Attention rows are distributions over the real source tokens only.
      EXPECT_TRUE(close(attention.sum(1), at::ones({3})));
      EXPECT_EQ(attention[1].narrow(0, 2, 4).abs().max().item<float>(), 0.0f);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Norms, IncrementalDecoding, ::testing::Values(true, false),
                         [](const auto& info) { return info.param ? "PreNorm" : "PostNorm"; });

// Beams read their sentence's one copy of the source keys and values: rows of a sentence with
// width 3 get the logits each would get alone, and reorder() moves the caches with the beams.
TEST(IncrementalDecoding, BeamsShareTheirSentenceSourceCache) {
  at::manual_seed(6);
  TransformerModel model(tiny());
  model->eval();
  at::NoGradGuard no_grad;
  auto source = at::randint(4, 11, {2, 5}, at::kLong);
  const auto lengths = at::tensor({5, 3}, at::kLong);
  const auto encoded = model->encode(source, lengths);
  auto state = model->start(encoded);
  model->step(at::full({2}, 1, at::kLong), state);                 // <sos>, one row per sentence
  state.reorder(at::tensor({0, 0, 0, 1, 1, 1}), at::Tensor(), 3);  // three beams each
  const auto tokens = at::tensor({4, 5, 6, 7, 8, 9});
  const auto beams = model->step(tokens, state);      // [6, V]
  EXPECT_EQ(state.layers[0].memory_keys.size(0), 2);  // still one copy per sentence
  for (int64_t row = 0; row < 6; ++row) {
    const int64_t sentence = row / 3;
    auto alone =
        model->start({encoded.memory.narrow(0, sentence, 1), encoded.mask.narrow(0, sentence, 1)});
    model->step(at::full({1}, 1, at::kLong), alone);
    EXPECT_TRUE(close(model->step(tokens.narrow(0, row, 1), alone)[0], beams[row])) << row;
  }
  // The second sentence finishes: its rows leave; the fused step's sources stay where they are
  // and the one sentence left reads source 0 (ReorderedBeamsKeepTheirOwnHistories holds a
  // sentence that reads source 1 to the composite step, which moves the sources).
  ASSERT_TRUE(state.fused);
  state.reorder(at::tensor({1, 2}), at::tensor({0}), 2);
  EXPECT_EQ(state.slots, std::vector<int64_t>{0});
  EXPECT_EQ(state.layers[0].memory_keys.size(0), 2);
  EXPECT_EQ(model->step(at::tensor({4, 4}), state).size(0), 2);
}

// Beams that split, die and leave with their sentence, over several positions: the fused step's
// caches follow each row's history as the composite step's (an at::index_select of every cached
// key and value per reorder) do, at every step. Heads of 16 (d_model 64) take the AVX-512
// attention rows; 2 sentences of 3 beams, a sentence leaving after the fourth step.
TEST(IncrementalDecoding, ReorderedBeamsKeepTheirOwnHistories) {
  at::manual_seed(7);
  TransformerModel model(tiny().d_model(64).heads(4));
  model->eval();
  at::NoGradGuard no_grad;
  auto source = at::randint(4, 11, {2, 5}, at::kLong);
  const auto lengths = at::tensor({5, 3}, at::kLong);
  const auto encoded = model->encode(source, lengths);
  auto fused = model->start(encoded), composite = model->start(encoded, StepPath::Packed);
  ASSERT_TRUE(fused.fused && !composite.fused);
  // Row i of the next step continues row origin[i]: splits (a row continued twice), a row
  // nobody continues, and the rows in another order.
  const std::vector<std::vector<int64_t>> origins = {
      {0, 0, 0, 1, 1, 1}, {2, 0, 2, 3, 3, 5}, {1, 1, 1, 5, 4, 3}, {0, 2, 2, 4, 4, 4}};
  auto tokens = at::full({2}, 1, at::kLong);
  for (size_t t = 0; t <= origins.size(); ++t) {
    const auto a = model->step(tokens, fused), b = model->step(tokens, composite);
    EXPECT_TRUE(close(a, b)) << "step " << t;
    if (t == origins.size()) break;
    const auto origin = at::tensor(origins[t], at::kLong);
    fused.reorder(origin, at::Tensor(), 3);
    composite.reorder(origin, at::Tensor(), 3);
    tokens = at::randint(4, 13, {6}, at::kLong);
  }
  // The first sentence leaves; the second's beams split once more.
  const auto origin = at::tensor({5, 3, 3}, at::kLong), kept = at::tensor({1}, at::kLong);
  fused.reorder(origin, kept, 3);
  composite.reorder(origin, kept, 3);
  for (int step = 0; step < 2; ++step) {
    tokens = at::randint(4, 13, {3}, at::kLong);
    EXPECT_TRUE(close(model->step(tokens, fused), model->step(tokens, composite)))
        << "after the sentence left, step " << step;
    fused.reorder(at::tensor({2, 2, 0}, at::kLong), at::Tensor(), 3);
    composite.reorder(at::tensor({2, 2, 0}, at::kLong), at::Tensor(), 3);
  }
}

// A beam search's step at batch 32 has enough rows for the kernels' threads to share its
// per-row work (self- and cross-attention rows, the FFN's activation) as well as its products:
// the same bits on one thread and two. 128 rows, heads of 64, 12 source positions, FFN 1024:
// from the second step on every one of those loops is split.
TEST(IncrementalDecoding, RowsSplitBetweenThreadsGiveTheSameBits) {
  at::manual_seed(8);
  TransformerModel model(TransformerOptions(17, 19)
                             .d_model(256)
                             .heads(4)
                             .encoder_layers(1)
                             .decoder_layers(2)
                             .ffn(1024)
                             .activation(Activation::Gelu));
  model->eval();
  at::NoGradGuard no_grad;
  const int64_t rows = 128;
  auto lengths = at::randint(1, 13, {rows}, at::kLong);
  auto source = at::randint(4, 17, {rows, 12}, at::kLong);
  source.masked_fill_(padding_mask(lengths, 12).squeeze(1).logical_not(), 0);
  const auto encoded = model->encode(source, lengths);
  auto run = [&](int threads) {
    set_threads(threads, ThreadPolicy::Kernels);
    auto state = model->start(encoded);
    auto tokens = at::full({rows}, 1, at::kLong);
    std::vector<at::Tensor> outputs;
    for (int t = 0; t < 4; ++t) {
      at::Tensor attention;
      auto logits = model->step(tokens, state, &attention);
      outputs.insert(outputs.end(), {logits, attention});
      tokens = logits.argmax(-1);
    }
    return outputs;
  };
  const auto one = run(1), two = run(2);
  set_threads(1);
  for (size_t i = 0; i < one.size(); ++i)
    EXPECT_TRUE(at::equal(one[i], two[i])) << "step " << i / 2 << ", output " << i % 2;
}

TEST(TransformerModel, SharedEmbeddingsAreOneParameter) {
  TransformerModel shared(tiny().source_vocab(13).share_embeddings(true));
  std::set<const void*> seen;
  int64_t count = 0;
  for (const auto& p : shared->parameters()) {
    seen.insert(p.data_ptr());
    ++count;
  }
  EXPECT_EQ(static_cast<int64_t>(seen.size()), count);  // no tensor listed twice
  EXPECT_TRUE(shared->source_embedding->weight.is_same(shared->target_embedding->weight));
  EXPECT_THROW(TransformerModel(tiny().share_embeddings(true)), Error);  // 11 vs 13 tokens
  EXPECT_THROW(TransformerModel(tiny().heads(3)), Error);
}

TEST(TransformerModel, PositionsAreVaswanisSinusoids) {
  const auto p = transformer::sinusoidal_positions(3, 2, 6);  // positions 3 and 4
  for (int64_t pos = 3; pos < 5; ++pos)
    for (int64_t i = 0; i < 3; ++i) {
      const double angle = pos / std::pow(10000.0, 2.0 * i / 6);
      EXPECT_NEAR(p[pos - 3][2 * i].item<double>(), std::sin(angle), 1e-6);
      EXPECT_NEAR(p[pos - 3][2 * i + 1].item<double>(), std::cos(angle), 1e-6);
    }
}

}  // namespace
}  // namespace attnkit
