#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "attnkit/train/trainable.h"

namespace torch::nn {
class Module;
}

// Checkpoint averaging: the element-wise mean of the weights a run held at its last few
// checkpoints (Vaswani et al. 2017 averaged the last 5 or 20; fairseq's average_checkpoints.py
// does the same). Near the end of training the weights wander around a minimum; their mean sits
// closer to it than any one of them. Training with keep_checkpoints > 0 keeps the weights;
// `attnkit average` averages them into a model directory of their own.
namespace attnkit::train {

// model_dir/checkpoints/step-NNNNNNNN.pt: the weights (model.pt's format) at a checkpoint.
std::string kept_weights_path(const std::string& model_dir, int64_t step);

// The kept weight files of model_dir, oldest (lowest step) first; none when there are none.
std::vector<std::string> kept_weights(const std::string& model_dir);

// Writes the model's weights as the kept weights of `step`, then deletes all but the newest
// `keep` kept files.
void keep_weights(Trainable& model, const std::string& model_dir, int64_t step, int64_t keep);

// Loads each weight file into `module` in turn (io::load_weights: shapes and finite values
// checked, errors naming the file) and leaves the module holding their element-wise mean,
// summed in double precision. Tensors that are not floating point must be equal in every file.
void average_weights(torch::nn::Module& module, const std::vector<std::string>& files);

}  // namespace attnkit::train
