#pragma once

#include "attnkit/rnn/model.h"
#include "attnkit/train/trainable.h"

// The GRU encoder-decoder (rnn/model.h) as the training loop sees it.
namespace attnkit::rnn {

class RnnTrainable : public train::Trainable {
 public:
  // Keeps a reference: the model must outlive it.
  explicit RnnTrainable(RnnModel& model);
  std::vector<at::Tensor> parameters() override;
  void set_training(bool training) override;
  // The real target tokens only, padding skipped, through the output layer fused with the loss;
  // REINFORCE's reward reads every position's logits, and a partly free-running decoder needs
  // each step's.
  train::BatchLoss loss(const train::Batch& batch, const train::LossOptions& options,
                        train::ReinforceBaseline& baseline) override;
  double validation_loss(const train::Batch& batch) override;
  torch::nn::Module& module() override { return *model_; }

 private:
  // The loss from the output layer's input (Head::Features), with the model's output layer.
  at::Tensor output_loss(const at::Tensor& features, const at::Tensor& target, double smoothing);

  RnnModel& model_;
  bool reinforce_;  // hard attention trained with REINFORCE
};

}  // namespace attnkit::rnn
