#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

#include "attnkit/train/batching.h"
#include "attnkit/train/step.h"

namespace torch::nn {
class Module;
}  // namespace torch::nn

// What the training loop (train/trainer.h) needs of a model, and nothing of its architecture:
// each model implements it in its own folder (rnn/trainable.h, transformer/trainable.h).
namespace attnkit::train {

struct LossOptions {
  double label_smoothing = 0.1;
  double teacher_forcing = 1.0;  // chance of feeding the gold token
  double entropy_bonus = 0.01;   // REINFORCE hard attention only
};

struct BatchLoss {
  at::Tensor loss;       // scalar: the mean token loss, for the log
  at::Tensor objective;  // scalar: what to differentiate (the loss, or with REINFORCE's terms)
};

class Trainable {
 public:
  virtual ~Trainable() = default;
  virtual std::vector<at::Tensor> parameters() = 0;
  // Training mode (dropout) on or off.
  virtual void set_training(bool training) = 0;
  // The forward pass and loss of one training batch. `baseline` is the REINFORCE state the loop
  // keeps (and checkpoints) for models that sample.
  virtual BatchLoss loss(const Batch& batch, const LossOptions& options,
                         ReinforceBaseline& baseline) = 0;
  // Whether loss() and the backward pass of its objective may run on several threads at once,
  // on parts of one batch (TrainOptions::lanes): nothing shared between calls is written (the
  // REINFORCE baseline is), and nothing random is drawn but kernels::dropout's seeds.
  virtual bool runs_in_lanes() const { return false; }
  // The mean token cross-entropy of a batch, without label smoothing or gradients.
  virtual double validation_loss(const Batch& batch) = 0;
  // The weights: what model.pt and a checkpoint hold.
  virtual torch::nn::Module& module() = 0;
};

}  // namespace attnkit::train
