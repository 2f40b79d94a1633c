#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include <utility>

#include "attnkit/attention/attention.h"
#include "attnkit/kernels/gemm/packed_linear.h"
#include "attnkit/kernels/ops/ragged.h"

namespace attnkit {

struct SelfAttentionOptions {
  explicit SelfAttentionOptions(int64_t embed_dim) : embed_dim_(embed_dim) {}
  TORCH_ARG(int64_t, embed_dim);
  TORCH_ARG(bool, bias) = true;
};

// Projected self-attention: softmax((X W_q)(X W_k)^T / sqrt(d)) (X W_v).
class SelfAttentionImpl : public torch::nn::Module {
 public:
  explicit SelfAttentionImpl(SelfAttentionOptions options);
  // x [B, T, E], mask broadcastable to [B, T, T] -> output [B, T, E], weights [B, T, T].
  AttentionOutput forward(const at::Tensor& x, const at::Tensor& mask = {});

  SelfAttentionOptions options;
  torch::nn::Linear w_q{nullptr}, w_k{nullptr}, w_v{nullptr};
};
TORCH_MODULE(SelfAttention);

struct MultiheadAttentionOptions {
  MultiheadAttentionOptions(int64_t embed_dim, int64_t num_heads)
      : embed_dim_(embed_dim), num_heads_(num_heads) {}
  TORCH_ARG(int64_t, embed_dim);
  TORCH_ARG(int64_t, num_heads);
  TORCH_ARG(bool, bias) = true;
  // Dropout on the attention weights in training mode, as torch.nn.MultiheadAttention's dropout
  // (the returned weights are those before it).
  TORCH_ARG(double, dropout) = 0.0;
};

struct MultiheadOutput {
  at::Tensor output;   // [B, Tq, E]
  at::Tensor weights;  // [B, H, Tq, Tk], per head
};

// Multi-head scaled-dot attention with an output projection. Parameter names and layout match
// torch.nn.MultiheadAttention (in_proj_weight [3E, E], in_proj_bias [3E], out_proj.{weight,bias}),
// so its state_dict loads as is.
// MultiheadAttention's in- and out-projections packed for inference (kernels/packed_linear.h):
// self-attention takes one product against the whole in-projection.
struct PackedProjections {
  kernels::PackedLinear in_proj, out_proj;
};

class MultiheadAttentionImpl : public torch::nn::Module {
 public:
  explicit MultiheadAttentionImpl(MultiheadAttentionOptions options);
  // Xavier-uniform projections and zero biases, as torch.nn.MultiheadAttention.
  void reset_parameters();
  // query [B, Tq, E], key/value [B, Tk, E], mask broadcastable to [B, Tq, Tk] (shared by heads).
  // need_weights = false leaves MultiheadOutput::weights undefined, which lets float32 on the
  // CPU without attention dropout run kernels::fused_attention (the [Tq, Tk] weights are then
  // never stored for the backward pass); the reference path is the same math.
  MultiheadOutput forward(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                          const at::Tensor& mask = {}, bool need_weights = true,
                          const PackedProjections* packed = nullptr);
  // forward() on the real rows of a batch (kernels/ragged.h), for training without the padding:
  // query [R, E] holds the rows of `ragged`'s sequences; key_value [B, Tk, E] (the same tensor
  // for keys and values), or undefined for self-attention on the query rows. The projections run
  // on the R rows; only the attention sees the padded layout. mask as forward()'s, for the padded
  // [B, T, Tk]. Returns [R, E], equal to forward()'s real rows wherever the mask keeps padding
  // from them (causal self-attention, a key padding mask).
  at::Tensor forward_ragged(const at::Tensor& query, const kernels::Ragged& ragged,
                            const at::Tensor& key_value = {}, const at::Tensor& mask = {});
  // The projections packed once, for inference with unchanging weights (a translation
  // model's encoder): forward(..., packed) then streams them instead of packing per call.
  PackedProjections pack(kernels::ComputeType type = kernels::ComputeType::Float32);

  MultiheadAttentionOptions options;
  at::Tensor in_proj_weight, in_proj_bias;
  torch::nn::Linear out_proj{nullptr};

 private:
  // x [..., E] -> the queries [..., E], or the keys and values side by side [..., 2E], by one
  // product on rows of in_proj_weight.
  at::Tensor project_queries(const at::Tensor& x);
  at::Tensor project_keys_values(const at::Tensor& x);
  // Both for a cross-attention, as one node (kernels::linear_blocks): the weight's gradient in
  // one tensor, not two full-size ones for LibTorch to add.
  std::pair<at::Tensor, at::Tensor> project_cross(const at::Tensor& query, const at::Tensor& key);
};
TORCH_MODULE(MultiheadAttention);

}  // namespace attnkit
