#include "attnkit/transformer/layers.h"

#include <ATen/ATen.h>

#include <cmath>

#include "attnkit/core/error.h"
#include "attnkit/kernels/ops/dropout.h"
#include "attnkit/kernels/ops/layer_norm.h"
#include "attnkit/kernels/ops/linear.h"
#include "attnkit/kernels/ops/masked_softmax.h"

namespace attnkit::transformer {

using torch::nn::LayerNorm;
using torch::nn::LayerNormOptions;
using torch::nn::Linear;
using torch::nn::LinearOptions;

std::string to_string(Activation activation) {
  return activation == Activation::Gelu ? "gelu" : "relu";
}

Activation parse_activation(const std::string& name) {
  if (name == "relu") return Activation::Relu;
  if (name == "gelu") return Activation::Gelu;
  throw Error("unknown activation '" + name + "' (relu | gelu)");
}

namespace {

MultiheadAttention attention_for(const LayerOptions& o) {
  return MultiheadAttention(
      MultiheadAttentionOptions(o.d_model(), o.nhead()).dropout(o.attention_dropout()));
}

LayerNorm norm_for(const LayerOptions& o) {
  return LayerNorm(LayerNormOptions({o.d_model()}).eps(o.layer_norm_eps()));
}

// The position-wise feed-forward block: linear2(dropout(activation(linear1(x)))).
at::Tensor feed_forward(const at::Tensor& x, Linear& linear1, Linear& linear2,
                        const LayerOptions& o, bool training) {
  auto h = kernels::linear(x, linear1->weight, linear1->bias);
  h = o.activation() == Activation::Gelu ? kernels::dropout(at::gelu(h), o.ffn_dropout(), training)
                                         : kernels::relu_dropout(h, o.ffn_dropout(), training);
  return kernels::linear(h, linear2->weight, linear2->bias);
}

// The same on packed weights, for inference.
at::Tensor feed_forward(const at::Tensor& x, const kernels::PackedLinear& linear1,
                        const kernels::PackedLinear& linear2, const LayerOptions& o) {
  auto h = linear1(x);
  return linear2(o.activation() == Activation::Gelu ? at::gelu(h) : at::relu_(h));
}

// The module holds the parameters (torch.nn's state_dict names); the rows go through
// kernels::layer_norm, on the kernels' threads.
at::Tensor normed(torch::nn::LayerNorm& norm, const at::Tensor& x) {
  return kernels::layer_norm(x, norm->weight, norm->bias, norm->options.eps());
}

// One sublayer with its residual connection, its output f(...) joining the stream through dropout
// (in training): x + dropout(f(norm(x))) pre-norm, norm(x + dropout(f(x))) post-norm. Pre-norm,
// x's two uses are one node (kernels::layer_norm_branch), so its two gradients meet on the
// kernels' threads.
template <typename F>
at::Tensor residual(const at::Tensor& x, torch::nn::LayerNorm& norm, const LayerOptions& o,
                    bool training, const F& f) {
  if (!o.norm_first()) return normed(norm, kernels::add_dropout(x, f(x), o.dropout(), training));
  const auto [stream, y] =
      kernels::layer_norm_branch(x, norm->weight, norm->bias, norm->options.eps());
  return kernels::add_dropout(stream, f(y), o.dropout(), training);
}

// An attention sublayer's output; `weights` (optional) receives the attention weights.
at::Tensor attention_block(MultiheadAttention& attn, const at::Tensor& q, const at::Tensor& kv,
                           const at::Tensor& mask, at::Tensor* weights,
                           const PackedProjections* packed = nullptr) {
  auto out = attn->forward(q, kv, kv, mask, /*need_weights=*/weights != nullptr, packed);
  if (weights) *weights = out.weights;
  return out.output;
}

void check_width(const at::Tensor& x, int64_t d_model, const char* where) {
  TORCH_CHECK(x.dim() >= 2 && x.size(-1) == d_model, where, ": input must be [..., ", d_model,
              "] but has shape ", x.sizes());
}

}  // namespace

// ---- encoder layer ----

TransformerEncoderLayerImpl::TransformerEncoderLayerImpl(LayerOptions options_)
    : options(options_),
      self_attn(attention_for(options)),
      linear1(LinearOptions(options.d_model(), options.dim_feedforward())),
      linear2(LinearOptions(options.dim_feedforward(), options.d_model())),
      norm1(norm_for(options)),
      norm2(norm_for(options)) {
  register_module("self_attn", self_attn);
  register_module("linear1", linear1);
  register_module("linear2", linear2);
  register_module("norm1", norm1);
  register_module("norm2", norm2);
}

at::Tensor TransformerEncoderLayerImpl::forward(const at::Tensor& x, const at::Tensor& mask,
                                                at::Tensor* weights,
                                                const PackedEncoderLayer* packed) {
  check_width(x, options.d_model(), "TransformerEncoderLayer");
  const bool training = is_training();
  TORCH_CHECK(!packed || !training, "TransformerEncoderLayer: packed weights are for eval mode");
  auto h = residual(x, norm1, options, training, [&](const at::Tensor& y) {
    return attention_block(self_attn, y, y, mask, weights, packed ? &packed->self_attn : nullptr);
  });
  return residual(h, norm2, options, training, [&](const at::Tensor& y) {
    if (packed) return feed_forward(y, packed->linear1, packed->linear2, options);
    return feed_forward(y, linear1, linear2, options, training);
  });
}

PackedEncoderLayer TransformerEncoderLayerImpl::pack(kernels::ComputeType type) {
  return {self_attn->pack(type), kernels::PackedLinear(linear1->weight, linear1->bias, type),
          kernels::PackedLinear(linear2->weight, linear2->bias, type)};
}

// ---- decoder layer ----

TransformerDecoderLayerImpl::TransformerDecoderLayerImpl(LayerOptions options_)
    : options(options_),
      self_attn(attention_for(options)),
      multihead_attn(attention_for(options)),
      linear1(LinearOptions(options.d_model(), options.dim_feedforward())),
      linear2(LinearOptions(options.dim_feedforward(), options.d_model())),
      norm1(norm_for(options)),
      norm2(norm_for(options)),
      norm3(norm_for(options)) {
  register_module("self_attn", self_attn);
  register_module("multihead_attn", multihead_attn);
  register_module("linear1", linear1);
  register_module("linear2", linear2);
  register_module("norm1", norm1);
  register_module("norm2", norm2);
  register_module("norm3", norm3);
}

at::Tensor TransformerDecoderLayerImpl::forward(const at::Tensor& x, const at::Tensor& memory,
                                                const at::Tensor& self_mask,
                                                const at::Tensor& memory_mask,
                                                LayerAttention* weights,
                                                const kernels::Ragged* ragged) {
  check_width(x, options.d_model(), "TransformerDecoderLayer");
  TORCH_CHECK(!ragged || !weights,
              "TransformerDecoderLayer: attention weights come from the padded layout only");
  const bool training = is_training();
  auto h = residual(x, norm1, options, training, [&](const at::Tensor& y) {
    // On the real rows of a batch: y [R, D]; no key/value tensor for self-attention.
    if (ragged) return self_attn->forward_ragged(y, *ragged, {}, self_mask);
    return attention_block(self_attn, y, y, self_mask, weights ? &weights->self : nullptr);
  });
  h = residual(h, norm2, options, training, [&](const at::Tensor& y) {
    if (ragged) return multihead_attn->forward_ragged(y, *ragged, memory, memory_mask);
    return attention_block(multihead_attn, y, memory, memory_mask,
                           weights ? &weights->cross : nullptr);
  });
  return residual(h, norm3, options, training, [&](const at::Tensor& y) {
    return feed_forward(y, linear1, linear2, options, training);
  });
}

void TransformerDecoderLayerImpl::project_memory(const at::Tensor& memory, LayerCache& cache,
                                                 const PackedDecoderLayer* packed) {
  const int64_t d = options.d_model(), heads = options.nhead();
  auto& attn = *multihead_attn;
  auto w = attn.in_proj_weight.narrow(0, d, 2 * d);  // [W_k; W_v]: one product for both
  auto b = attn.in_proj_bias.defined() ? attn.in_proj_bias.narrow(0, d, 2 * d) : at::Tensor();
  auto kv = (packed ? packed->cross_kv(memory) : kernels::linear(memory, w, b))  // [A, S, 2D]
                .view({memory.size(0), memory.size(1), 2, heads, d / heads})
                .permute({2, 0, 3, 1, 4});  // [2, A, H, S, d]
  cache.memory_keys = kv[0].contiguous();
  cache.memory_values = kv[1].contiguous();
}

at::Tensor TransformerDecoderLayerImpl::self_attention_step(const at::Tensor& x, LayerCache& cache,
                                                            const PackedDecoderLayer* packed) {
  const int64_t n = x.size(0), d = options.d_model(), heads = options.nhead();
  auto& attn = *self_attn;
  auto qkv =
      (packed ? packed->self_qkv(x) : kernels::linear(x, attn.in_proj_weight, attn.in_proj_bias))
          .view({n, 3, heads, d / heads});
  auto q = qkv.select(1, 0).unsqueeze(2);  // [N, H, 1, d]
  auto k = qkv.select(1, 1).unsqueeze(2), v = qkv.select(1, 2).unsqueeze(2);
  cache.self_keys = cache.self_keys.defined() ? at::cat({cache.self_keys, k}, 2) : k.contiguous();
  cache.self_values =
      cache.self_values.defined() ? at::cat({cache.self_values, v}, 2) : v.contiguous();
  // Every earlier position of a row is visible to its newest: no mask.
  auto scores = at::matmul(q * (1.0 / std::sqrt(static_cast<double>(d / heads))),
                           cache.self_keys.transpose(-2, -1));            // [N, H, 1, t]
  auto context = at::matmul(at::softmax(scores, -1), cache.self_values);  // [N, H, 1, d]
  const auto merged = context.view({n, d});
  return packed ? packed->self_out(merged)
                : kernels::linear(merged, attn.out_proj->weight, attn.out_proj->bias);
}

at::Tensor TransformerDecoderLayerImpl::cross_attention_step(const at::Tensor& x,
                                                             const LayerCache& cache,
                                                             const at::Tensor& memory_mask,
                                                             int64_t width, at::Tensor* weights,
                                                             const PackedDecoderLayer* packed) {
  const int64_t n = x.size(0), d = options.d_model(), heads = options.nhead();
  const int64_t sentences = n / width, s = cache.memory_keys.size(2);
  auto& attn = *multihead_attn;
  auto b = attn.in_proj_bias.defined() ? attn.in_proj_bias.narrow(0, 0, d) : at::Tensor();
  // A sentence's beams are extra query rows against its one copy of the keys and values.
  auto q =
      (packed ? packed->cross_q(x) : kernels::linear(x, attn.in_proj_weight.narrow(0, 0, d), b))
          .view({sentences, width, heads, d / heads})
          .permute({0, 2, 1, 3});  // [A, H, width, d]
  auto scores = at::matmul(q * (1.0 / std::sqrt(static_cast<double>(d / heads))),
                           cache.memory_keys.transpose(-2, -1));  // [A, H, width, S]
  auto w = kernels::masked_softmax(scores, memory_mask.view({sentences, 1, 1, s}));
  auto context = at::matmul(w, cache.memory_values)  // [A, H, width, d]
                     .permute({0, 2, 1, 3})
                     .reshape({n, d});
  if (weights) *weights = w.permute({0, 2, 1, 3}).reshape({n, heads, s});
  return packed ? packed->cross_out(context)
                : kernels::linear(context, attn.out_proj->weight, attn.out_proj->bias);
}

PackedDecoderLayer TransformerDecoderLayerImpl::pack(kernels::ComputeType type) {
  const int64_t d = options.d_model();
  auto rows = [](const at::Tensor& b, int64_t first, int64_t count) {
    return b.defined() ? b.narrow(0, first, count) : at::Tensor();
  };
  auto& s = *self_attn;
  auto& c = *multihead_attn;
  PackedDecoderLayer p;
  p.self_qkv = kernels::PackedLinear(s.in_proj_weight, s.in_proj_bias, type);
  p.self_out = kernels::PackedLinear(s.out_proj->weight, s.out_proj->bias, type);
  p.cross_q =
      kernels::PackedLinear(c.in_proj_weight.narrow(0, 0, d), rows(c.in_proj_bias, 0, d), type);
  p.cross_kv = kernels::PackedLinear(c.in_proj_weight.narrow(0, d, 2 * d),
                                     rows(c.in_proj_bias, d, 2 * d), type);
  p.cross_out = kernels::PackedLinear(c.out_proj->weight, c.out_proj->bias, type);
  p.linear1 = kernels::PackedLinear(linear1->weight, linear1->bias, type);
  p.linear2 = kernels::PackedLinear(linear2->weight, linear2->bias, type);
  return p;
}

at::Tensor TransformerDecoderLayerImpl::step(const at::Tensor& x, LayerCache& cache,
                                             const at::Tensor& memory_mask, int64_t width,
                                             at::Tensor* cross_weights,
                                             const PackedDecoderLayer* packed) {
  TORCH_CHECK(!is_training(),
              "TransformerDecoderLayer::step: incremental decoding is for eval "
              "mode (dropout off)");
  check_width(x, options.d_model(), "TransformerDecoderLayer::step");
  auto ff = [&](const at::Tensor& h) {
    return packed ? feed_forward(h, packed->linear1, packed->linear2, options)
                  : feed_forward(h, linear1, linear2, options, /*training=*/false);
  };
  auto self = [&](const at::Tensor& h) { return self_attention_step(h, cache, packed); };
  auto cross = [&](const at::Tensor& h) {
    return cross_attention_step(h, cache, memory_mask, width, cross_weights, packed);
  };
  auto h = residual(x, norm1, options, /*training=*/false, self);
  h = residual(h, norm2, options, /*training=*/false, cross);
  return residual(h, norm3, options, /*training=*/false, ff);
}

// ---- stacks ----

TransformerEncoderImpl::TransformerEncoderImpl(const LayerOptions& options, int64_t num_layers)
    : layers(torch::nn::ModuleList()), norm(norm_for(options)) {
  for (int64_t i = 0; i < num_layers; ++i) layers->push_back(TransformerEncoderLayer(options));
  register_module("layers", layers);
  register_module("norm", norm);
}

TransformerEncoderLayerImpl& TransformerEncoderImpl::layer(size_t i) {
  return *layers[i]->as<TransformerEncoderLayerImpl>();
}

at::Tensor TransformerEncoderImpl::forward(const at::Tensor& x, const at::Tensor& mask,
                                           std::vector<LayerAttention>* weights,
                                           const std::vector<PackedEncoderLayer>& packed) {
  auto h = x;
  for (size_t i = 0; i < layers->size(); ++i) {
    at::Tensor w;
    h = layer(i).forward(h, mask, weights ? &w : nullptr, packed.empty() ? nullptr : &packed[i]);
    if (weights) weights->push_back({w, {}});
  }
  return normed(norm, h);
}

TransformerDecoderImpl::TransformerDecoderImpl(const LayerOptions& options, int64_t num_layers)
    : layers(torch::nn::ModuleList()), norm(norm_for(options)) {
  for (int64_t i = 0; i < num_layers; ++i) layers->push_back(TransformerDecoderLayer(options));
  register_module("layers", layers);
  register_module("norm", norm);
}

TransformerDecoderLayerImpl& TransformerDecoderImpl::layer(size_t i) {
  return *layers[i]->as<TransformerDecoderLayerImpl>();
}

at::Tensor TransformerDecoderImpl::forward(const at::Tensor& x, const at::Tensor& memory,
                                           const at::Tensor& self_mask,
                                           const at::Tensor& memory_mask,
                                           std::vector<LayerAttention>* weights,
                                           const kernels::Ragged* ragged) {
  auto h = x;
  for (size_t i = 0; i < layers->size(); ++i) {
    LayerAttention w;
    h = layer(i).forward(h, memory, self_mask, memory_mask, weights ? &w : nullptr, ragged);
    if (weights) weights->push_back(std::move(w));
  }
  return normed(norm, h);
}

at::Tensor TransformerDecoderImpl::step(const at::Tensor& x, std::vector<LayerCache>& caches,
                                        const at::Tensor& memory_mask, int64_t width,
                                        std::vector<at::Tensor>* cross_weights,
                                        const std::vector<PackedDecoderLayer>& packed) {
  auto h = x;
  for (size_t i = 0; i < layers->size(); ++i) {
    at::Tensor w;
    h = layer(i).step(h, caches[i], memory_mask, width, cross_weights ? &w : nullptr,
                      packed.empty() ? nullptr : &packed[i]);
    if (cross_weights) cross_weights->push_back(std::move(w));
  }
  return normed(norm, h);
}

TransformerImpl::TransformerImpl(const LayerOptions& options, int64_t encoder_layers,
                                 int64_t decoder_layers)
    : encoder(options, encoder_layers), decoder(options, decoder_layers) {
  register_module("encoder", encoder);
  register_module("decoder", decoder);
}

at::Tensor TransformerImpl::forward(const at::Tensor& src, const at::Tensor& tgt,
                                    const at::Tensor& src_mask, const at::Tensor& tgt_mask,
                                    const at::Tensor& memory_mask) {
  return decoder(tgt, encoder(src, src_mask), tgt_mask, memory_mask);
}

}  // namespace attnkit::transformer
