#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <vector>

#include "attnkit/kernels/gemm/compute_type.h"

// One inference step of the attention decoder (GRU layers, soft additive or Bahdanau attention,
// with or without input feeding), in float32 on raw buffers.
//
// Why it exists: at batch 1 the LibTorch step (rnn::DecoderImpl::step) spends most of its
// time in per-op overhead and in OpenBLAS packing whole weight matrices for one-row GEMMs. Here
// the weights are packed once per decoder for the AVX-512 or AVX2 blocks (kernels::PackedLinear,
// whatever the rows: decoding's speed does not depend on which kernels OpenBLAS picked), the GRU
// gates, scores, softmax and context run in hand-written loops, and no autograd or dispatcher
// sits between them.
//
// The reference is DecoderImpl::step in eval mode; tests/test_fused_step.cpp holds this step to it
// (logits, states and attention, at batch 1 and on the packed path, with masks and layers).
// rnn::FusedStep builds the weights from a Decoder and keeps them across searches.
namespace attnkit::kernels {

// The weights a step multiplies by, as views of the decoder's own tensors (no copies).
// H hidden, E embedding, A attention, Hm memory width, V target vocabulary, L layers.
struct DecoderStepWeights {
  // Every target embedding through the first GRU layer's input weights, with its bias:
  // [V, 3H] = embedding W_ih[:, :E]^T + b_ih, so a step looks its tokens' part up instead of
  // multiplying it (E of the layer's E + H inputs with input feeding).
  at::Tensor table;
  at::Tensor w_feed;                // [3H, H]: W_ih's feed columns; undefined: no input feeding
  std::vector<at::Tensor> w_ih;     // L x [3H, H]; the first undefined (it is in the table)
  std::vector<at::Tensor> w_hh;     // L x [3H, H]
  std::vector<at::Tensor> b_ih;     // L x [3H] (the first unused: it is in the table)
  std::vector<at::Tensor> b_hh;     // L x [3H]
  at::Tensor w_query;               // [A, H]: the query half of the score's linear layer
  at::Tensor v;                     // [A]: Bahdanau's v, or ones for the plain additive sum
  at::Tensor w_combine, b_combine;  // [H, H + Hm], [H]
  at::Tensor w_output, b_output;    // [V, H], [V]
  // [A, Hm], [A]: the key half of the score's linear layer and its bias, for project_keys once
  // per source (undefined: not packed).
  at::Tensor w_key, b_key;
};

// The weights packed for the step. Packing costs as much as a few thousand row-steps, more than
// a batch decodes: build it once per set of weights and share it (it is immutable).
class PackedDecoderWeights {
 public:
  // The products compute in `type`; the table stays float32 (a lookup, not a product).
  explicit PackedDecoderWeights(const DecoderStepWeights& weights,
                                ComputeType type = ComputeType::Float32);
  ~PackedDecoderWeights();
  // memory [N, S, Hm] -> the keys a step reads, [N, S, A] = memory W_key^T + b_key.
  at::Tensor project_keys(const at::Tensor& memory) const;
  struct Impl;
  const Impl& impl() const { return *impl_; }

 private:
  std::unique_ptr<const Impl> impl_;
};

// What a step reads about the source and the steps so far (N rows, S source positions, B
// sources: N with a row per source, else the sentences whose beams the rows are).
struct DecoderStepInputs {
  at::Tensor tokens;  // [N] the previous target tokens
  at::Tensor hidden;  // [L, N, H]
  at::Tensor feed;    // [N, 1, H] the previous attentional vector (input feeding only)
  at::Tensor memory;  // [B, S, Hm]
  at::Tensor keys;    // [B, S, A]: the memory through the key half of the score, with its bias
  at::Tensor mask;    // [B, 1, S] true on real source tokens; undefined: all real
  // [N] long: row n reads source row source_row[n] (a beam search's beams share their
  // sentence's); undefined: row n reads row n (B = N).
  at::Tensor source_row;
};

struct DecoderStepOutputs {
  at::Tensor logits;     // [N, V]
  at::Tensor hidden;     // [L, N, H]
  at::Tensor feed;       // [N, 1, H]
  at::Tensor attention;  // [N, S]; a row with no real source token is all zeros
};

// A step with its own scratch buffers: one per search (not shared between threads).
class DecoderStep {
 public:
  explicit DecoderStep(std::shared_ptr<const PackedDecoderWeights> weights);
  DecoderStepOutputs operator()(const DecoderStepInputs& in);

 private:
  std::shared_ptr<const PackedDecoderWeights> weights_;
  std::vector<float> gi_, gh_, query_, combine_in_;  // grown as needed
};

}  // namespace attnkit::kernels
