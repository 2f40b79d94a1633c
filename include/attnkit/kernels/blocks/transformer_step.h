#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "attnkit/kernels/gemm/packed_linear.h"

// One incremental decoding step of a Transformer decoder stack (pre- or post-norm, relu or gelu),
// its final norm and its output layer, in float32 on raw buffers; the products on weights packed
// once per model (kernels::PackedLinear, float32 or int8).
//
// Why it exists: the composite step (transformer::TransformerDecoderLayer::step on packed
// weights) spent most of a beam search outside its products: LibTorch's per-op overhead around
// three layer norms, two attentions and three residual adds per layer, the self-attention cache
// concatenated anew at every step (a copy of every earlier key and value), and the attention
// products handed to OpenBLAS (which runs its SSE3 kernels on CPUs it does not know). Here each
// row's attention is a few dot products over its own history, each position's keys and values
// are written once, by the row that computed them, and no dispatcher sits between the pieces.
//
// Reference: TransformerDecoderImpl::step (tests/test_transformer.cpp holds this step to it at
// every position, for pre- and post-norm, relu and gelu, with beams sharing their sentence's
// source and with padding), and so the full causal forward pass.
namespace attnkit::kernels {

// One decoder layer's weights, D = d_model, F = the feed-forward width.
struct TransformerStepLayer {
  PackedLinear self_qkv;   // [3D, D]: q, k, v of the newest position
  PackedLinear self_out;   // [D, D]
  PackedLinear cross_q;    // [D, D]: the query of the cross-attention (its keys and values are
                           // the source's, projected once per sentence by the caller)
  PackedLinear cross_out;  // [D, D]
  PackedLinear linear1;    // [F, D]
  PackedLinear linear2;    // [D, F]
  at::Tensor norm1_weight, norm1_bias, norm2_weight, norm2_bias, norm3_weight, norm3_bias;  // [D]
};

struct TransformerStepWeights {
  std::vector<TransformerStepLayer> layers;
  at::Tensor norm_weight, norm_bias;  // [D]: the stack's final norm
  PackedLinear output;                // [V, D]
  int64_t heads = 1;
  bool norm_first = true;       // x + f(norm(x)); false: norm(x + f(x))
  bool gelu = false;            // the feed-forward activation (erf GELU), else ReLU
  double eps = 1e-5;            // the layer norms'
  int64_t alignment_layer = 0;  // whose cross-attention a step's `attention` receives
};

// A search's step: N rows (= sentences x width, sentence-major), the self-attention keys and
// values of every earlier position kept here per layer and grown in place. Not for sharing
// between threads (its caches and scratch are the search's).
class TransformerDecoderStep {
 public:
  explicit TransformerDecoderStep(std::shared_ptr<const TransformerStepWeights> weights);

  // x [N, D]: each row's newest position, embedded. memory_keys[l], memory_values[l]
  // [B, H, S, d] (d = D / H): layer l's cross-attention keys and values, one copy per sentence
  // shared by its `width` rows; memory_mask [B, S] bool, true on real source tokens. The N rows
  // are A = N / width sentences: sentence a reads source slots[a] of the B, or source a when
  // `slots` is empty (then A = B). A search whose sentences finish keeps its sources where they
  // are and narrows `slots`: copying the sources of those left had been 0.7 % of a beam search's
  // samples (beam 5, batch 32, two Zen 5 cores). Returns the logits [N, V]; `attention`, if
  // given, receives layer weights.alignment_layer's cross-attention averaged over its heads, [N, S]
  // (a row without a real source token is zeros).
  at::Tensor operator()(const at::Tensor& x, const std::vector<at::Tensor>& memory_keys,
                        const std::vector<at::Tensor>& memory_values, const at::Tensor& memory_mask,
                        int64_t width, const std::vector<int64_t>& slots = {},
                        at::Tensor* attention = nullptr);

  // Row i of the next step continues row origin[i] of this one (the self-attention caches
  // follow; the source's are the caller's). Nothing is copied: row i takes over row origin[i]'s
  // history, the list of which row wrote each of its positions, and beams that split share
  // their ancestors' keys and values. Copying a split beam's cache had been 2.2-2.6 % of a beam
  // search's samples (beam 5, batch 32, two Zen 5 cores); reading shared ancestors, the
  // attention rows went from 7.0 to 6.0 %, the memory moves from 3.0 to 1.1 %.
  void reorder(const std::vector<int64_t>& origin);

  int64_t positions() const { return length_; }

 private:
  struct Cache {
    // Per position t, the keys and values of the rows that ran step t: [rows at t, H, d] each.
    std::vector<std::unique_ptr<float[]>> keys, values;
  };

  std::shared_ptr<const TransformerStepWeights> weights_;
  std::vector<Cache> caches_;  // per layer
  // [rows, length_]: history_[r * length_ + t] is the row of step t whose keys and values are
  // row r's position t.
  std::vector<int64_t> history_;
  int64_t rows_ = 0, length_ = 0;
  std::vector<float> h_, y_, wide_, merged_, out_;  // scratch, grown as needed
};

}  // namespace attnkit::kernels
