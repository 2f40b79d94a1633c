#include "attnkit/transformer/search.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

namespace attnkit::transformer {

TransformerStepDecoder::TransformerStepDecoder(TransformerModel& model, const at::Tensor& source,
                                               const at::Tensor& lengths)
    : model_(model),
      state_(model->start(model->encode(source, lengths, /*maps=*/nullptr, /*packed=*/true))) {}

decoding::StepDecoder::Step TransformerStepDecoder::step(const at::Tensor& tokens) {
  Step out;
  out.logits = model_->step(tokens, state_, &out.attention);
  return out;
}

void TransformerStepDecoder::reorder(const at::Tensor& origin, const at::Tensor& sentences,
                                     int64_t width) {
  state_.reorder(origin, sentences, width);
}

std::vector<std::vector<decoding::Hypothesis>> search(TransformerModel& model,
                                                      const at::Tensor& source,
                                                      const at::Tensor& lengths,
                                                      const decoding::SearchOptions& options,
                                                      decoding::SearchStats* stats) {
  c10::InferenceMode inference;
  // Searches may share one model across threads: the flag is written only when it changes.
  if (model->is_training()) model->eval();
  TransformerStepDecoder decoder(model, source, lengths);
  return decoding::search(decoder, lengths, options, stats);
}

}  // namespace attnkit::transformer
