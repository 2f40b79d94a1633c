#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>
#include <torch/nn/pimpl.h>

#include <string>
#include <vector>

#include "attnkit/attention/self_attention.h"
#include "attnkit/kernels/gemm/packed_linear.h"

// The notes' last section taken where the field went next: self-attention (Q = K = V, projected
// and split into heads) as the building block of the Transformer (Vaswani et al. 2017). The layers
// mirror torch.nn.TransformerEncoderLayer / TransformerDecoderLayer / TransformerEncoder /
// TransformerDecoder / Transformer (batch_first = true): the same parameter names, so their
// state_dicts load unchanged (tests/test_transformer.cpp holds them to PyTorch's outputs and
// gradients). Masks follow attention/mask.h: true where a key may be attended to.
namespace attnkit::transformer {

enum class Activation { Relu, Gelu };
std::string to_string(Activation activation);
Activation parse_activation(const std::string& name);  // "relu" | "gelu"

// torch.nn.TransformerEncoderLayer's arguments. PyTorch uses one dropout everywhere; here the
// residual, attention-weight and feed-forward dropouts can differ (the three are equal in
// PyTorch's layer).
struct LayerOptions {
  LayerOptions(int64_t d_model, int64_t nhead) : d_model_(d_model), nhead_(nhead) {}
  TORCH_ARG(int64_t, d_model);
  TORCH_ARG(int64_t, nhead);
  TORCH_ARG(int64_t, dim_feedforward) = 2048;
  TORCH_ARG(double, dropout) = 0.1;            // on each sublayer's output, before the residual add
  TORCH_ARG(double, attention_dropout) = 0.1;  // on the attention weights
  TORCH_ARG(double, ffn_dropout) = 0.1;        // after the feed-forward activation
  TORCH_ARG(Activation, activation) = Activation::Relu;
  TORCH_ARG(double, layer_norm_eps) = 1e-5;
  // Pre-norm, x + f(norm(x)) (the default of modern systems: stable without a long warm-up), or
  // post-norm, norm(x + f(x)) (the 2017 paper and PyTorch's default).
  TORCH_ARG(bool, norm_first) = false;
};

// What a forward pass can hand back for pictures: attention weights per head.
struct LayerAttention {
  at::Tensor self;   // [B, H, Tq, Tq]
  at::Tensor cross;  // [B, H, Tq, S] (decoder layers)
};

// An encoder layer's weights packed once for translation (kernels/packed_linear.h).
struct PackedEncoderLayer {
  PackedProjections self_attn;
  kernels::PackedLinear linear1, linear2;
};

class TransformerEncoderLayerImpl : public torch::nn::Module {
 public:
  explicit TransformerEncoderLayerImpl(LayerOptions options);
  // x [B, S, D], mask broadcastable to [B, S, S] -> [B, S, D]. `weights`, if given, receives the
  // self-attention weights [B, H, S, S]. `packed` (inference only): pack()'s products.
  at::Tensor forward(const at::Tensor& x, const at::Tensor& mask = {},
                     at::Tensor* weights = nullptr, const PackedEncoderLayer* packed = nullptr);
  PackedEncoderLayer pack(kernels::ComputeType type = kernels::ComputeType::Float32);

  LayerOptions options;
  MultiheadAttention self_attn{nullptr};
  torch::nn::Linear linear1{nullptr}, linear2{nullptr};
  torch::nn::LayerNorm norm1{nullptr}, norm2{nullptr};
};
TORCH_MODULE(TransformerEncoderLayer);

// A decoder layer's weights packed once for incremental decoding (kernels/packed_linear.h).
struct PackedDecoderLayer {
  kernels::PackedLinear self_qkv, self_out, cross_q, cross_kv, cross_out, linear1, linear2;
};

// Incremental decoding's memory of one decoder layer.
struct LayerCache {
  // Self-attention keys and values of the steps so far: [N, H, t, d], one row per hypothesis.
  at::Tensor self_keys, self_values;
  // The source projected by the cross-attention, once per sentence and shared by its beams:
  // [A, H, S, d], A sentences (N = A x beams).
  at::Tensor memory_keys, memory_values;
};

class TransformerDecoderLayerImpl : public torch::nn::Module {
 public:
  explicit TransformerDecoderLayerImpl(LayerOptions options);
  // x [B, T, D], memory [B, S, D]; self_mask broadcastable to [B, T, T] (e.g. causal),
  // memory_mask to [B, T, S] -> [B, T, D]. With `ragged` (kernels/ragged.h; no `weights`), x is
  // [R, D], the real rows of those T positions, and so is the result: the products, norms and
  // dropouts skip the padding, which is exact when self_mask is causal.
  at::Tensor forward(const at::Tensor& x, const at::Tensor& memory, const at::Tensor& self_mask,
                     const at::Tensor& memory_mask, LayerAttention* weights = nullptr,
                     const kernels::Ragged* ragged = nullptr);

  // ---- incremental decoding (eval mode) ----
  // The cross-attention keys and values of `memory` [A, S, D] into cache.memory_*.
  void project_memory(const at::Tensor& memory, LayerCache& cache,
                      const PackedDecoderLayer* packed = nullptr);
  // One step for N = A x width rows, sentence-major: x [N, D] is each row's newest position;
  // its self-attention key and value join the cache. memory_mask [A, S] (bool, true = real).
  // `cross_weights`, if given, receives [N, H, S]. `packed` (from pack()): the products on
  // weights packed once; null: kernels::linear, the reference.
  at::Tensor step(const at::Tensor& x, LayerCache& cache, const at::Tensor& memory_mask,
                  int64_t width, at::Tensor* cross_weights = nullptr,
                  const PackedDecoderLayer* packed = nullptr);
  // This layer's weights packed for step(); views them, so they must not change meanwhile.
  PackedDecoderLayer pack(kernels::ComputeType type = kernels::ComputeType::Float32);

  LayerOptions options;
  MultiheadAttention self_attn{nullptr}, multihead_attn{nullptr};
  torch::nn::Linear linear1{nullptr}, linear2{nullptr};
  torch::nn::LayerNorm norm1{nullptr}, norm2{nullptr}, norm3{nullptr};

 private:
  at::Tensor self_attention_step(const at::Tensor& x, LayerCache& cache,
                                 const PackedDecoderLayer* packed);
  at::Tensor cross_attention_step(const at::Tensor& x, const LayerCache& cache,
                                  const at::Tensor& memory_mask, int64_t width, at::Tensor* weights,
                                  const PackedDecoderLayer* packed);
};
TORCH_MODULE(TransformerDecoderLayer);

// torch.nn.TransformerEncoder: layers.{i}, then the final norm.
class TransformerEncoderImpl : public torch::nn::Module {
 public:
  TransformerEncoderImpl(const LayerOptions& options, int64_t num_layers);
  // `weights`, if given, receives each layer's self-attention weights; `packed`: one per layer
  // (inference only), or empty for the reference products.
  at::Tensor forward(const at::Tensor& x, const at::Tensor& mask = {},
                     std::vector<LayerAttention>* weights = nullptr,
                     const std::vector<PackedEncoderLayer>& packed = {});
  TransformerEncoderLayerImpl& layer(size_t i);
  torch::nn::ModuleList layers{nullptr};
  torch::nn::LayerNorm norm{nullptr};
};
TORCH_MODULE(TransformerEncoder);

// torch.nn.TransformerDecoder: layers.{i}, then the final norm.
class TransformerDecoderImpl : public torch::nn::Module {
 public:
  TransformerDecoderImpl(const LayerOptions& options, int64_t num_layers);
  // `ragged`: as TransformerDecoderLayer's, x and the result [R, D].
  at::Tensor forward(const at::Tensor& x, const at::Tensor& memory, const at::Tensor& self_mask,
                     const at::Tensor& memory_mask, std::vector<LayerAttention>* weights = nullptr,
                     const kernels::Ragged* ragged = nullptr);
  // One incremental step through every layer (caches: one per layer) and the final norm;
  // `packed`: one per layer, or empty for the reference products.
  at::Tensor step(const at::Tensor& x, std::vector<LayerCache>& caches,
                  const at::Tensor& memory_mask, int64_t width,
                  std::vector<at::Tensor>* cross_weights = nullptr,
                  const std::vector<PackedDecoderLayer>& packed = {});
  TransformerDecoderLayerImpl& layer(size_t i);
  torch::nn::ModuleList layers{nullptr};
  torch::nn::LayerNorm norm{nullptr};
};
TORCH_MODULE(TransformerDecoder);

// torch.nn.Transformer's module tree: encoder.{layers.i, norm}, decoder.{layers.i, norm}.
// PyTorch gives both stacks a final LayerNorm whatever norm_first says, and so does this.
class TransformerImpl : public torch::nn::Module {
 public:
  TransformerImpl(const LayerOptions& options, int64_t encoder_layers, int64_t decoder_layers);
  // src [B, S, D], tgt [B, T, D] -> [B, T, D].
  at::Tensor forward(const at::Tensor& src, const at::Tensor& tgt, const at::Tensor& src_mask,
                     const at::Tensor& tgt_mask, const at::Tensor& memory_mask);
  TransformerEncoder encoder{nullptr};
  TransformerDecoder decoder{nullptr};
};
TORCH_MODULE(Transformer);

}  // namespace attnkit::transformer
