#pragma once

#include "attnkit/decoding/translation_model.h"
#include "attnkit/transformer/model.h"

namespace attnkit::transformer {

// The Transformer as the translator drives it: its incremental decoder for searches, and every
// layer's and head's attention for pictures.
class TransformerTranslationModel : public decoding::TranslationModel {
 public:
  explicit TransformerTranslationModel(TransformerModel model) : model_(std::move(model)) {}
  std::unique_ptr<decoding::StepDecoder> start(const at::Tensor& source, const at::Tensor& lengths,
                                               const decoding::SearchOptions& options) override;
  decoding::AttentionLayers attention_layers(const std::vector<int64_t>& source,
                                             const std::vector<int64_t>& decoder_inputs) override;
  torch::nn::Module& module() override { return *model_; }
  kernels::ComputeType compute_type() const override { return model_->options.compute_type(); }
  TransformerModel& model() { return model_; }

 private:
  TransformerModel model_;
};

}  // namespace attnkit::transformer
