#include "attnkit/rnn/search.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

namespace attnkit::rnn {

RnnStepDecoder::RnnStepDecoder(RnnModel& model, const at::Tensor& source, const at::Tensor& lengths,
                               const decoding::SearchOptions& o)
    : decoder_(model->decoder) {
  if (o.fused && FusedStep::supports(decoder_)) fused_.emplace(decoder_);
  const auto encoded = model->encoder->forward(source, lengths, /*packed=*/o.fused);
  state_ = fused_ ? fused_->start(encoded) : decoder_->start(encoded);
}

decoding::StepDecoder::Step RnnStepDecoder::step(const at::Tensor& tokens) {
  auto out = fused_ ? fused_->step(tokens, state_) : decoder_->step(tokens, state_);
  return {out.logits, out.attention};
}

void RnnStepDecoder::reorder(const at::Tensor& origin, const at::Tensor& sentences, int64_t width) {
  at::Tensor source_rows;  // the reference step's source fields hold one row per hypothesis
  if (!state_.source_row.defined() && (sentences.defined() || width != width_)) {
    auto kept = sentences.defined() ? sentences : at::arange(origin.size(0) / width, at::kLong);
    source_rows = (kept * width_).repeat_interleave(width);
  }
  state_ = state_.reorder_beams(origin, source_rows);
  width_ = width;
}

namespace {

// Searches may share one model across threads (the translator's parallel batches), so the mode
// flags are written only when the model is still training.
void ensure_eval(RnnModel& model) {
  if (model->is_training()) model->eval();
}

}  // namespace

std::vector<std::vector<decoding::Hypothesis>> greedy_search(RnnModel& model,
                                                             const at::Tensor& source,
                                                             const at::Tensor& lengths,
                                                             const decoding::SearchOptions& o,
                                                             decoding::SearchStats* stats) {
  c10::InferenceMode inference;
  ensure_eval(model);
  RnnStepDecoder decoder(model, source, lengths, o);
  return decoding::greedy_search(decoder, lengths, o, stats);
}

std::vector<std::vector<decoding::Hypothesis>> beam_search(RnnModel& model,
                                                           const at::Tensor& source,
                                                           const at::Tensor& lengths,
                                                           const decoding::SearchOptions& o,
                                                           decoding::SearchStats* stats) {
  c10::InferenceMode inference;
  ensure_eval(model);
  RnnStepDecoder decoder(model, source, lengths, o);
  return decoding::beam_search(decoder, lengths, o, stats);
}

std::vector<std::vector<decoding::Hypothesis>> search(RnnModel& model, const at::Tensor& source,
                                                      const at::Tensor& lengths,
                                                      const decoding::SearchOptions& o,
                                                      decoding::SearchStats* stats) {
  return o.beam_size <= 1 ? greedy_search(model, source, lengths, o, stats)
                          : beam_search(model, source, lengths, o, stats);
}

}  // namespace attnkit::rnn
