#pragma once

#include "attnkit/train/trainable.h"
#include "attnkit/transformer/model.h"

// The Transformer (transformer/model.h) as the training loop sees it.
namespace attnkit::transformer {

class TransformerTrainable : public train::Trainable {
 public:
  // Keeps a reference: the model must outlive it.
  explicit TransformerTrainable(TransformerModel& model);
  std::vector<at::Tensor> parameters() override;
  void set_training(bool training) override;
  // Teacher forcing over the whole target at once (the causal mask hides the future); the output
  // layer runs on the real target tokens only, fused with the label-smoothed loss.
  train::BatchLoss loss(const train::Batch& batch, const train::LossOptions& options,
                        train::ReinforceBaseline& baseline) override;
  // Its randomness is kernels::dropout's (the attention weights' dropout included).
  bool runs_in_lanes() const override { return true; }
  double validation_loss(const train::Batch& batch) override;
  torch::nn::Module& module() override { return *model_; }

 private:
  at::Tensor token_loss(const train::Batch& batch, double smoothing);

  TransformerModel& model_;
};

}  // namespace attnkit::transformer
