#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/pimpl.h>

#include <memory>
#include <vector>

#include "attnkit/kernels/blocks/transformer_step.h"
#include "attnkit/kernels/gemm/compute_type.h"
#include "attnkit/transformer/layers.h"

// A Transformer translation model: token embeddings scaled by sqrt(d_model) plus sinusoidal
// positions, torch.nn.Transformer's encoder and decoder (layers.h), and an output layer tied to
// the target embedding. Sizes default to what trains in minutes on a few CPU cores.
namespace attnkit::transformer {

// The decoder layer whose cross-attention, averaged over its heads, a search keeps as each
// token's alignment to the source (for copying a source token in place of <unk> or a
// placeholder): the penultimate, the last of a one-layer decoder. The last layer aligns worse, as
// Garg et al. (2019) found: on held-out catalogs the 3+3 model copying by the penultimate layer
// gained 2.6 chrF2 and 0.8 BLEU after 10 minutes of training (bench/compare_quality.sh).
inline int64_t alignment_layer(int64_t layers) { return layers >= 2 ? layers - 2 : 0; }

struct TransformerOptions {
  TransformerOptions(int64_t source_vocab, int64_t target_vocab)
      : source_vocab_(source_vocab), target_vocab_(target_vocab) {}
  TORCH_ARG(int64_t, source_vocab);
  TORCH_ARG(int64_t, target_vocab);
  TORCH_ARG(int64_t, d_model) = 256;
  TORCH_ARG(int64_t, heads) = 4;
  TORCH_ARG(int64_t, encoder_layers) = 3;
  TORCH_ARG(int64_t, decoder_layers) = 3;
  TORCH_ARG(int64_t, ffn) = 1024;
  TORCH_ARG(double, dropout) = 0.1;
  // 0 by default, as in fairseq and Marian: training then runs the fused attention kernel, which
  // keeps no [T, S] weights (MultiheadAttentionImpl::forward).
  TORCH_ARG(double, attention_dropout) = 0.0;
  TORCH_ARG(double, ffn_dropout) = 0.1;
  TORCH_ARG(Activation, activation) = Activation::Relu;
  TORCH_ARG(bool, norm_first) = true;
  // The output layer's weight is the target embedding (Press & Wolf 2017).
  TORCH_ARG(bool, tie_output) = true;
  // One embedding for both sides; needs one vocabulary for both (source_vocab == target_vocab).
  TORCH_ARG(bool, share_embeddings) = false;
  // What decoding's packed products compute in (kernels/compute_type.h); training is float32.
  TORCH_ARG(kernels::ComputeType, compute_type) = kernels::ComputeType::Float32;

 public:
  // The layers' options; throws attnkit::Error unless heads divide d_model.
  LayerOptions layer() const;
};

// The encoder's result, for the decoder and for search.
struct Encoded {
  at::Tensor memory;  // [B, S, D]
  at::Tensor mask;    // [B, S] bool, true on real tokens
};

// Every attention map of a teacher-forced pass, per layer: encoder self [B, H, S, S], decoder
// self [B, H, T, T] and cross [B, H, T, S].
struct AttentionMaps {
  std::vector<at::Tensor> encoder_self, decoder_self, cross;
};

// The decoder's weights packed once for incremental decoding: kept per model across searches and
// threads, rebuilt when training or loading changes a parameter.
struct PackedDecoding {
  std::vector<PackedEncoderLayer> encoder;
  std::vector<PackedDecoderLayer> layers;
  kernels::PackedLinear output;
  std::shared_ptr<const kernels::TransformerStepWeights> step;  // the same, for the fused step
};

// How incremental decoding runs a step.
enum class StepPath {
  Fused,      // kernels::TransformerDecoderStep: the whole step on raw buffers (the searches')
  Packed,     // the layers' composite step on the packed products
  Reference,  // the layers' composite step on kernels::linear
};

// Incremental decoding's state for N = sentences x width rows, sentence-major.
struct DecodingState {
  std::vector<LayerCache> layers;
  std::shared_ptr<const PackedDecoding> packed;  // null: the reference products
  // StepPath::Fused: the step, which keeps the self-attention caches (layers[i].self_* unused).
  std::shared_ptr<kernels::TransformerDecoderStep> fused;
  at::Tensor memory_mask;  // [A, S]; StepPath::Fused: [B, S], the batch's, as layers[i].memory_*
  // StepPath::Fused: the source (of the batch's B) each of the A remaining sentences reads; its
  // sources stay where they are as sentences finish.
  std::vector<int64_t> slots;
  int64_t width = 1;     // rows per sentence
  int64_t position = 0;  // the next target position
  // Rows continue rows `origin` of the previous step; `sentences` (undefined: all, in order) are
  // the sentences that remain, as indices into the previous ones; each then has `width` rows.
  // The source caches move only with `sentences` (the fused step's do not move: `slots` does):
  // beams share them.
  void reorder(const at::Tensor& origin, const at::Tensor& sentences, int64_t width);
};

class TransformerModelImpl : public torch::nn::Module {
 public:
  explicit TransformerModelImpl(TransformerOptions options);
  // Xavier-uniform for every matrix, as torch.nn.Transformer's _reset_parameters; embeddings
  // N(0, d^-1/2) so that, scaled by sqrt(d), they start at unit size; biases zero.
  void reset_parameters();

  // source [B, S] token ids (0 = padding), lengths [B]. packed = true (eval mode, no
  // gradients, float32): the encoder's products on weights packed once per model, as decoding's.
  Encoded encode(const at::Tensor& source, const at::Tensor& lengths, AttentionMaps* maps = nullptr,
                 bool packed = false);
  // Teacher forcing: target_in [B, T] (starting with <sos>) -> the output layer's input
  // [B, T, D] (after the final norm). With `ragged` (no maps): [R, D], the real positions only,
  // sequence-major (the rows of ragged's mask.nonzero()), computed without the padding.
  at::Tensor decode(const at::Tensor& target_in, const Encoded& encoded,
                    AttentionMaps* maps = nullptr, const kernels::Ragged* ragged = nullptr);
  // Features [..., D] -> logits [..., V].
  at::Tensor project(const at::Tensor& features);
  // The output layer's weight [V, D] and bias [V].
  const at::Tensor& output_weight() const;
  const at::Tensor& output_bias() const { return output_bias_; }

  // ---- incremental decoding (eval mode) ----
  DecodingState start(const Encoded& encoded, StepPath path = StepPath::Fused);
  // tokens [N] -> logits [N, V]; `attention` receives the cross-attention averaged over the
  // heads of layer alignment_layer(decoder layers), the penultimate, [N, S] (what the
  // search keeps for replacing <unk> and pictures).
  at::Tensor step(const at::Tensor& tokens, DecodingState& state, at::Tensor* attention = nullptr);

  TransformerOptions options;
  torch::nn::Embedding source_embedding{nullptr}, target_embedding{nullptr};
  Transformer transformer{nullptr};

 private:
  // Every product's weights packed once per set of weights (core/derived_weights.h); null when
  // they cannot be (not float32).
  std::shared_ptr<const PackedDecoding> packed_weights();
  // The fused step's view of those weights and of the norms.
  std::shared_ptr<const kernels::TransformerStepWeights> step_weights(const PackedDecoding& packed);
  // Embedding x sqrt(d) + positions [offset, offset + T), dropout: [B, T] -> [B, T, D].
  at::Tensor embed(torch::nn::Embedding& embedding, const at::Tensor& tokens, int64_t offset);
  at::Tensor positions_;      // [1024, D], not a parameter: made, never saved
  at::Tensor output_weight_;  // untied only: [V, D]
  at::Tensor output_bias_;    // [V]
};
TORCH_MODULE(TransformerModel);

// The sinusoidal position encodings of Vaswani et al.: [length, d], rows offset.. offset+length-1.
at::Tensor sinusoidal_positions(int64_t offset, int64_t length, int64_t d);

}  // namespace attnkit::transformer
