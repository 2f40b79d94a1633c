#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "attnkit/seq2seq/search.h"
#include "attnkit/transformer/model.h"

// Greedy and beam search (seq2seq/search.h) over the Transformer's incremental decoder: per-layer
// self-attention caches that follow the beams, and source keys and values computed once per
// sentence and shared by its beams.
namespace attnkit::transformer {

class TransformerStepDecoder : public seq2seq::StepDecoder {
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

// Dispatches on options.beam_size, as seq2seq::search. The model is put in eval mode.
std::vector<std::vector<seq2seq::Hypothesis>> search(TransformerModel& model,
                                                     const at::Tensor& source,
                                                     const at::Tensor& lengths,
                                                     const seq2seq::SearchOptions& options,
                                                     seq2seq::SearchStats* stats = nullptr);

}  // namespace attnkit::transformer
