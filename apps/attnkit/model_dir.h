#pragma once

#include <string>

// A new model directory made from another (attnkit average, attnkit quantize): it never replaces
// a model, and it carries the files that describe the model besides its weights.
namespace attnkit::cli {

// Creates `out` for `command`; an attnkit::Error when `out` is `model` itself or already holds
// a model (config.json or model.pt).
void prepare_new_model_dir(const std::string& command, const std::string& model,
                           const std::string& out);

// Copies the model's description from `model` to `out`: config.json, the vocabularies and any
// SentencePiece models.
void copy_model_description(const std::string& model, const std::string& out);

}  // namespace attnkit::cli
