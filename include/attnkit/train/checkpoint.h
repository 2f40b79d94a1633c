#pragma once

#include <cstdint>
#include <string>

#include "attnkit/train/step.h"
#include "attnkit/train/trainable.h"

namespace torch::optim {
class Adam;
}
namespace torch::nn {
class Module;
}

// Training checkpoints (model_dir/checkpoint.pt): the weights, the optimizer's state, the random
// generator and where the run stands, so that a resumed run continues exactly as an
// uninterrupted one would (tests/test_rnn.cpp checks it bit for bit).
namespace attnkit::train {

// Where a run stands, and what its decisions depend on.
struct Position {
  int64_t epoch = 0, batch = 0, step = 0;
  int64_t bad_epochs = 0, bad_lr_epochs = 0;  // epochs without improvement, for stop and decay
  double best_bleu = -1, best_loss = 1e30, lr = 0;
  ReinforceBaseline baseline;
};

// A checkpoint's "position" [6] int64 and "metrics" [4] float64 tensors as a Position (the
// baseline's momentum taken from `into`); their dtypes and sizes are the caller's to check.
Position position_from(const at::Tensor& position, const at::Tensor& metrics, Position into = {});

// Written to a temporary file and renamed: a crash mid-write keeps the previous checkpoint.
void save_checkpoint(const std::string& path, Trainable& model, torch::optim::Adam& optimizer,
                     const Position& position);
// Restores the model, the optimizer and the global generator; returns the position (with the
// baseline's momentum left as `position` had it). attnkit::Error naming the file when it is
// missing or unreadable.
Position load_checkpoint(const std::string& path, Trainable& model, torch::optim::Adam& optimizer,
                         Position position = {});

// The latest weights in a training checkpoint (its "model" entry) into `model`, rather than the
// best (model.pt); the names, shapes and values checked as io::load_weights checks them.
void load_checkpoint_weights(torch::nn::Module& model, const std::string& checkpoint_path);

}  // namespace attnkit::train
