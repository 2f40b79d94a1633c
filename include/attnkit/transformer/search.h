#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "attnkit/decoding/search.h"
#include "attnkit/transformer/model.h"

// Greedy and beam search (decoding/search.h) over the Transformer's incremental decoder: per-layer
// self-attention caches that follow the beams, and source keys and values computed once per
// sentence and shared by its beams.
namespace attnkit::transformer {

class TransformerStepDecoder : public decoding::StepDecoder {
 public:
  // Encodes source [B, S] with lengths [B]; the model must be in eval mode.
  TransformerStepDecoder(TransformerModel& model, const at::Tensor& source,
                         const at::Tensor& lengths);
  Step step(const at::Tensor& tokens) override;
  void reorder(const at::Tensor& origin, const at::Tensor& sentences, int64_t width) override;

 private:
  TransformerModel model_;
  DecodingState state_;
};

// Dispatches on options.beam_size, as decoding::search. The model is put in eval mode.
std::vector<std::vector<decoding::Hypothesis>> search(TransformerModel& model,
                                                      const at::Tensor& source,
                                                      const at::Tensor& lengths,
                                                      const decoding::SearchOptions& options,
                                                      decoding::SearchStats* stats = nullptr);

}  // namespace attnkit::transformer
