#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "attnkit/translate/model_dir.h"

// Private to src/translate: config.json's "model" object, which only the registry knows per
// architecture.
namespace attnkit::translate {

nlohmann::json options_json(const ModelConfig& config);
// config.json's "model" (at `path`) into config's options for config.arch, each size checked so
// that a damaged or hand-edited config is refused naming its key before a model is built.
void read_options(const std::string& path, const nlohmann::json& model, ModelConfig& config);

}  // namespace attnkit::translate
