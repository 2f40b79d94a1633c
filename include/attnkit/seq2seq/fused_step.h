#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <vector>

#include "attnkit/seq2seq/model.h"

// An inference-only decoder step for the usual architecture (GRU layers, soft additive or
// Bahdanau attention, with or without input feeding), in float32 on raw buffers: one GEMV per row
// below kernels::blas::kGemvRows rows, above that weights packed once per decoder for the AVX-512
// or AVX2 blocks (src/kernels/packed_gemm.h), the GRU gates, scores, softmax and context in
// hand-written loops, and no autograd or dispatcher between them. At batch 1 the
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

  struct Weight;    // a weight and its packed panels
  struct Prepared;  // what every step multiplies by, shared by the steps of one decoder

 private:
  Seq2SeqOptions options_;
  std::shared_ptr<const Prepared> prepared_;
  std::vector<float> gi_, gh_, query_, combine_in_;  // scratch, grown as needed
};

}  // namespace attnkit::seq2seq
