#pragma once

#include "attnkit/decoding/translation_model.h"
#include "attnkit/rnn/model.h"

namespace attnkit::rnn {

// The GRU model as the translator drives it. Holds the module (shared, as LibTorch modules are).
class RnnTranslationModel : public decoding::TranslationModel {
 public:
  explicit RnnTranslationModel(RnnModel model) : model_(std::move(model)) {}
  std::unique_ptr<decoding::StepDecoder> start(const at::Tensor& source, const at::Tensor& lengths,
                                               const decoding::SearchOptions& options) override;
  torch::nn::Module& module() override { return *model_; }
  kernels::ComputeType compute_type() const override { return model_->options.compute_type(); }
  RnnModel& model() { return model_; }

 private:
  RnnModel model_;
};

}  // namespace attnkit::rnn
