#pragma once

#include <ATen/core/Tensor.h>

#include <memory>

#include "attnkit/kernels/blocks/decoder_step.h"
#include "attnkit/rnn/model.h"

// A Decoder's inference step on the raw-buffer kernel (kernels/decoder_step.h), for the searches:
// it views the decoder's weights, keeps them packed across searches and threads (rebuilt when
// training or loading changes a parameter), and keeps DecoderState's contract.
// DecoderImpl::step stays the reference (tests/test_fused_step.cpp); the searches use this one
// when supports() allows and SearchOptions::fused is on.
namespace attnkit::rnn {

class FusedStep {
 public:
  // Whether the decoder's configuration is one the kernel implements: soft additive or Bahdanau
  // attention with a biased score layer, float32 on the CPU.
  static bool supports(const Decoder& decoder);
  explicit FusedStep(const Decoder& decoder);
  // DecoderImpl::start, its keys projected on the packed weights.
  DecoderState start(const EncoderOutput& encoded);
  // The same contract as DecoderImpl::step in eval mode: logits [N, V], feed, attention [N, S];
  // `state` advances. log_prob and entropy stay undefined (no sampling).
  StepOutput step(const at::Tensor& tokens, DecoderState& state);

 private:
  Decoder decoder_;
  std::shared_ptr<const kernels::PackedDecoderWeights> weights_;
  kernels::DecoderStep step_;
};

}  // namespace attnkit::rnn
