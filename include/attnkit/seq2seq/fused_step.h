#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "attnkit/seq2seq/model.h"

// An inference-only decoder step for the usual architecture (GRU layers, soft additive or
// Bahdanau attention, with or without input feeding), in float32 on raw buffers: one BLAS call
// per product (GEMV per row below kernels::blas::kGemvRows rows), the GRU gates, scores, softmax
// and context in hand-written loops, and no autograd or dispatcher between them. At batch 1 the
// LibTorch step spends most of its time in per-op overhead and in OpenBLAS packing whole weight
// matrices for one-row GEMMs. DecoderImpl::step stays the reference (tests/test_fused_step.cpp);
// the searches use this one when supports() allows and SearchOptions::fused is on.
namespace attnkit::seq2seq {

class FusedStep {
 public:
  // Whether the decoder's configuration is one this step implements.
  static bool supports(const Decoder& decoder);
  explicit FusedStep(const Decoder& decoder);
  // The same contract as DecoderImpl::step in eval mode: logits [N, V], feed, attention [N, S];
  // `state` advances. log_prob and entropy stay undefined (no sampling).
  StepOutput step(const at::Tensor& tokens, DecoderState& state);

 private:
  struct Layer {
    at::Tensor w_ih, w_hh, b_ih, b_hh;  // PyTorch's [3H, in], [3H, H], [3H], [3H]
  };
  Seq2SeqOptions options_;
  at::Tensor embedding_projection_;  // [V, 3H]: embedding W_ih[:, :E]^T + b_ih of the first layer
  at::Tensor feed_w_ih_;             // [3H, H] view: the first layer's input weights for the feed
  std::vector<Layer> layers_;
  at::Tensor w_query_;                // [A, H] view: the query half of the score's linear layer
  at::Tensor v_;                      // [A]: Bahdanau's v, or ones for the plain additive sum
  at::Tensor w_combine_, b_combine_;  // [H, H + Hm], [H]
  at::Tensor w_output_, b_output_;    // [V, H], [V]
  std::vector<float> gi_, gh_, query_, combine_in_;  // scratch, grown as needed
};

}  // namespace attnkit::seq2seq
