#include "attnkit/transformer/model.h"

#include <ATen/ATen.h>
#include <torch/nn/init.h>
#include <torch/nn/options/embedding.h>

#include <cmath>
#include <numeric>

#include "../core/derived_weights.h"
#include "attnkit/attention/mask.h"
#include "attnkit/core/error.h"
#include "attnkit/kernels/ops/dropout.h"
#include "attnkit/kernels/ops/embedding.h"
#include "attnkit/kernels/ops/linear.h"

namespace attnkit::transformer {

using torch::nn::Embedding;
using torch::nn::EmbeddingOptions;

namespace {
const std::vector<PackedDecoderLayer> kNoPacking;
const std::vector<PackedEncoderLayer> kNoEncoding;
// Positions up to this length come from a table made once; longer ones are computed when asked.
constexpr int64_t kPositionTable = 1024;
}  // namespace

at::Tensor sinusoidal_positions(int64_t offset, int64_t length, int64_t d) {
  auto position = at::arange(offset, offset + length, at::kDouble).unsqueeze(1);  // [T, 1]
  auto i = at::arange(0, d, 2, at::kDouble);                                      // [ceil(d/2)]
  auto angle = position * at::exp(i * (-std::log(10000.0) / static_cast<double>(d)));
  auto table = at::zeros({length, d}, at::kDouble);
  table.slice(1, 0, d, 2).copy_(at::sin(angle));
  table.slice(1, 1, d, 2).copy_(at::cos(angle).narrow(1, 0, d / 2));
  return table.to(at::kFloat);
}

LayerOptions TransformerOptions::layer() const {
  if (heads() < 1 || d_model() % heads() != 0)
    throw Error("the Transformer's d_model (" + std::to_string(d_model()) +
                ") must be a multiple of its heads (" + std::to_string(heads()) + ")");
  return LayerOptions(d_model(), heads())
      .dim_feedforward(ffn())
      .dropout(dropout())
      .attention_dropout(attention_dropout())
      .ffn_dropout(ffn_dropout())
      .activation(activation())
      .norm_first(norm_first());
}

void DecodingState::reorder(const at::Tensor& origin, const at::Tensor& sentences,
                            int64_t new_width) {
  if (fused) {
    const auto o = origin.to(at::kLong).contiguous();
    fused->reorder(std::vector<int64_t>(o.data_ptr<int64_t>(), o.data_ptr<int64_t>() + o.numel()));
    if (sentences.defined()) {
      const auto kept = sentences.to(at::kLong).contiguous();
      std::vector<int64_t> remaining;
      for (int64_t i = 0; i < kept.numel(); ++i) {
        const int64_t a = kept.data_ptr<int64_t>()[i];
        TORCH_CHECK(a >= 0 && a < static_cast<int64_t>(slots.size()), "DecodingState: sentence ", a,
                    " is not one of the ", slots.size());
        remaining.push_back(slots[a]);
      }
      slots = std::move(remaining);
    }
    width = new_width;
    return;
  }
  for (auto& layer : layers) {
    layer.self_keys = layer.self_keys.index_select(0, origin);
    layer.self_values = layer.self_values.index_select(0, origin);
    if (sentences.defined()) {
      layer.memory_keys = layer.memory_keys.index_select(0, sentences);
      layer.memory_values = layer.memory_values.index_select(0, sentences);
    }
  }
  if (sentences.defined()) memory_mask = memory_mask.index_select(0, sentences);
  width = new_width;
}

TransformerModelImpl::TransformerModelImpl(TransformerOptions options_)
    : options(options_),
      transformer(options.layer(), options.encoder_layers(), options.decoder_layers()),
      positions_(sinusoidal_positions(0, kPositionTable, options.d_model())) {
  const auto& o = options;
  if (o.share_embeddings() && o.source_vocab() != o.target_vocab())
    throw Error("shared embeddings need one vocabulary for both sides, but the source has " +
                std::to_string(o.source_vocab()) + " tokens and the target " +
                std::to_string(o.target_vocab()));
  target_embedding =
      register_module("target_embedding",
                      Embedding(EmbeddingOptions(o.target_vocab(), o.d_model()).padding_idx(0)));
  // Shared: one module under both names, one tensor in parameters().
  source_embedding =
      o.share_embeddings()
          ? target_embedding
          : register_module(
                "source_embedding",
                Embedding(EmbeddingOptions(o.source_vocab(), o.d_model()).padding_idx(0)));
  register_module("transformer", transformer);
  if (!o.tie_output())
    output_weight_ =
        register_parameter("output_weight", at::empty({o.target_vocab(), o.d_model()}));
  output_bias_ = register_parameter("output_bias", at::empty({o.target_vocab()}));
  reset_parameters();
}

void TransformerModelImpl::reset_parameters() {
  torch::NoGradGuard no_grad;
  for (auto& p : transformer->parameters())
    if (p.dim() > 1) torch::nn::init::xavier_uniform_(p);
  const double scale = 1.0 / std::sqrt(static_cast<double>(options.d_model()));
  for (auto* e : {&source_embedding, &target_embedding}) {
    (*e)->weight.normal_(0.0, scale);
    (*e)->weight[0].zero_();  // <pad>
  }
  if (output_weight_.defined()) torch::nn::init::xavier_uniform_(output_weight_);
  output_bias_.zero_();
}

const at::Tensor& TransformerModelImpl::output_weight() const {
  return options.tie_output() ? target_embedding->weight : output_weight_;
}

at::Tensor TransformerModelImpl::embed(Embedding& embedding, const at::Tensor& tokens,
                                       int64_t offset) {
  const int64_t length = tokens.size(1), d = options.d_model();
  const auto positions = offset + length <= positions_.size(0)
                             ? positions_.narrow(0, offset, length)
                             : sinusoidal_positions(offset, length, d);
  auto x = kernels::embed(embedding->weight, tokens, std::sqrt(static_cast<double>(d)), positions,
                          embedding->options.padding_idx().value_or(-1));  // [B, T, D]
  return kernels::dropout(x, options.dropout(), is_training());
}

Encoded TransformerModelImpl::encode(const at::Tensor& source, const at::Tensor& lengths,
                                     AttentionMaps* maps, bool packed) {
  TORCH_CHECK(source.dim() == 2, "TransformerModel: source must be [B, S] but has shape ",
              source.sizes());
  Encoded e;
  e.mask = padding_mask(lengths, source.size(1)).squeeze(1);  // [B, S]
  std::vector<LayerAttention> weights;
  const auto weights_packed =
      packed && !is_training() && !at::GradMode::is_enabled() ? packed_weights() : nullptr;
  e.memory = transformer->encoder->forward(embed(source_embedding, source, 0), e.mask.unsqueeze(1),
                                           maps ? &weights : nullptr,
                                           weights_packed ? weights_packed->encoder : kNoEncoding);
  if (maps)
    for (auto& w : weights) maps->encoder_self.push_back(w.self);
  return e;
}

at::Tensor TransformerModelImpl::decode(const at::Tensor& target_in, const Encoded& encoded,
                                        AttentionMaps* maps, const kernels::Ragged* ragged) {
  TORCH_CHECK(target_in.dim() == 2, "TransformerModel: target must be [B, T] but has shape ",
              target_in.sizes());
  TORCH_CHECK(!ragged || !maps, "TransformerModel: attention maps come from the padded layout");
  const int64_t t = target_in.size(1);
  std::vector<LayerAttention> weights;
  auto x = embed(target_embedding, target_in, 0);
  if (ragged) x = kernels::unpad(x, *ragged);
  auto features =
      transformer->decoder->forward(x, encoded.memory, causal_mask(t, t), encoded.mask.unsqueeze(1),
                                    maps ? &weights : nullptr, ragged);
  if (maps)
    for (auto& w : weights) {
      maps->decoder_self.push_back(w.self);
      maps->cross.push_back(w.cross);
    }
  return features;
}

at::Tensor TransformerModelImpl::project(const at::Tensor& features) {
  return kernels::linear(features, output_weight(), output_bias_);
}

std::shared_ptr<const PackedDecoding> TransformerModelImpl::packed_weights() {
  if (output_weight().scalar_type() != at::kFloat) return nullptr;
  auto self = std::dynamic_pointer_cast<TransformerModelImpl>(shared_from_this());
  const auto type = options.compute_type();
  return derived_weights<PackedDecoding>(
      self,
      [&] {
        auto p = std::make_shared<PackedDecoding>();
        for (int64_t i = 0; i < options.encoder_layers(); ++i)
          p->encoder.push_back(transformer->encoder->layer(i).pack(type));
        for (int64_t i = 0; i < options.decoder_layers(); ++i)
          p->layers.push_back(transformer->decoder->layer(i).pack(type));
        p->output = kernels::PackedLinear(output_weight(), output_bias_, type);
        p->step = step_weights(*p);
        return std::shared_ptr<const PackedDecoding>(std::move(p));
      },
      /*tag=*/static_cast<uint32_t>(type));
}

std::shared_ptr<const kernels::TransformerStepWeights> TransformerModelImpl::step_weights(
    const PackedDecoding& packed) {
  auto w = std::make_shared<kernels::TransformerStepWeights>();
  auto frozen = [](const at::Tensor& t) { return t.detach().contiguous(); };
  for (int64_t i = 0; i < options.decoder_layers(); ++i) {
    const auto& p = packed.layers[i];
    auto& layer = transformer->decoder->layer(i);
    w->layers.push_back({p.self_qkv, p.self_out, p.cross_q, p.cross_out, p.linear1, p.linear2,
                         frozen(layer.norm1->weight), frozen(layer.norm1->bias),
                         frozen(layer.norm2->weight), frozen(layer.norm2->bias),
                         frozen(layer.norm3->weight), frozen(layer.norm3->bias)});
  }
  w->norm_weight = frozen(transformer->decoder->norm->weight);
  w->norm_bias = frozen(transformer->decoder->norm->bias);
  w->output = packed.output;
  w->heads = options.heads();
  w->norm_first = options.norm_first();
  w->gelu = options.activation() == Activation::Gelu;
  w->alignment_layer = alignment_layer(options.decoder_layers());
  w->eps = options.layer().layer_norm_eps();
  return w;
}

DecodingState TransformerModelImpl::start(const Encoded& encoded, StepPath path) {
  DecodingState state;
  if (path != StepPath::Reference) state.packed = packed_weights();
  if (path == StepPath::Fused && state.packed)
    state.fused = std::make_shared<kernels::TransformerDecoderStep>(state.packed->step);
  state.memory_mask = encoded.mask;
  if (state.fused) {
    state.slots.resize(encoded.mask.size(0));
    std::iota(state.slots.begin(), state.slots.end(), 0);
  }
  state.layers.resize(options.decoder_layers());
  for (int64_t i = 0; i < options.decoder_layers(); ++i)
    transformer->decoder->layer(i).project_memory(
        encoded.memory, state.layers[i], state.packed ? &state.packed->layers[i] : nullptr);
  return state;
}

at::Tensor TransformerModelImpl::step(const at::Tensor& tokens, DecodingState& state,
                                      at::Tensor* attention) {
  if (state.fused) {
    const auto position = state.position < positions_.size(0)
                              ? positions_[state.position]
                              : sinusoidal_positions(state.position, 1, options.d_model())[0];
    const auto x = kernels::embed_step(target_embedding->weight, tokens.view({-1}),
                                       std::sqrt(static_cast<double>(options.d_model())),
                                       position);  // [N, D]
    std::vector<at::Tensor> keys, values;
    for (const auto& layer : state.layers) {
      keys.push_back(layer.memory_keys);
      values.push_back(layer.memory_values);
    }
    ++state.position;
    return (*state.fused)(x, keys, values, state.memory_mask, state.width, state.slots, attention);
  }
  auto x = embed(target_embedding, tokens.view({-1, 1}), state.position).squeeze(1);  // [N, D]
  std::vector<at::Tensor> cross;
  auto h = transformer->decoder->step(x, state.layers, state.memory_mask, state.width,
                                      attention ? &cross : nullptr,
                                      state.packed ? state.packed->layers : kNoPacking);
  if (attention)  // [N, S]
    *attention = cross[alignment_layer(static_cast<int64_t>(cross.size()))].mean(1);
  ++state.position;
  return state.packed ? state.packed->output(h) : project(h);
}

}  // namespace attnkit::transformer
