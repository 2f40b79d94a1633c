#pragma once

#include <ATen/core/Tensor.h>

#include <optional>
#include <vector>

#include "attnkit/decoding/search.h"
#include "attnkit/rnn/fused_step.h"
#include "attnkit/rnn/model.h"

// The GRU model as decoding/search.h drives it.
namespace attnkit::rnn {

// FusedStep when allowed, else the module's own step, over a DecoderState whose source fields
// are per row. With SearchOptions::fused, the encoder and the decoder's steps run on packed
// weights (the encoder's GRU and bridge, the keys, every step's products) where the model
// allows. The model must be in eval mode, under inference mode.
class RnnStepDecoder : public decoding::StepDecoder {
 public:
  RnnStepDecoder(RnnModel& model, const at::Tensor& source, const at::Tensor& lengths,
                 const decoding::SearchOptions& options);
  Step step(const at::Tensor& tokens) override;
  void reorder(const at::Tensor& origin, const at::Tensor& sentences, int64_t width) override;

 private:
  Decoder decoder_;
  DecoderState state_;
  std::optional<FusedStep> fused_;
  int64_t width_ = 1;
};

// One list of hypotheses (best first, at most nbest) per source sentence: source [B, S],
// lengths [B]. The model is put in eval mode for the search.
std::vector<std::vector<decoding::Hypothesis>> greedy_search(
    RnnModel& model, const at::Tensor& source, const at::Tensor& lengths,
    const decoding::SearchOptions& options, decoding::SearchStats* stats = nullptr);
std::vector<std::vector<decoding::Hypothesis>> beam_search(RnnModel& model,
                                                           const at::Tensor& source,
                                                           const at::Tensor& lengths,
                                                           const decoding::SearchOptions& options,
                                                           decoding::SearchStats* stats = nullptr);
// Dispatches on options.beam_size.
std::vector<std::vector<decoding::Hypothesis>> search(RnnModel& model, const at::Tensor& source,
                                                      const at::Tensor& lengths,
                                                      const decoding::SearchOptions& options,
                                                      decoding::SearchStats* stats = nullptr);

}  // namespace attnkit::rnn
