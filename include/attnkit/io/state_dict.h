#pragma once

#include <torch/nn/module.h>

#include <string>
#include <utility>
#include <vector>

#include "attnkit/io/pt_file.h"

namespace attnkit::io {

struct LoadStateDictOptions {
  // Prefix renames applied to the file's keys before matching, e.g. {"qk_linear.",
  // "attention.score.linear."}.
  std::vector<std::pair<std::string, std::string>> renames;
  // Reject keys the module does not have.
  bool strict = true;
  // Named in error messages (usually the file path).
  std::string source = "state_dict";
};

// Copies a state_dict into a module's parameters and buffers. A missing key, an unexpected key
// (when strict) or a shape mismatch throws attnkit::Error naming the key and both shapes.
void load_state_dict(torch::nn::Module& module, const TensorDict& state,
                     const LoadStateDictOptions& options = {});

// The module's parameters and buffers under their dotted names, in registration order.
TensorDict state_dict(const torch::nn::Module& module);

}  // namespace attnkit::io
