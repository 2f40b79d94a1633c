#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "attnkit/decoding/translation_model.h"
#include "attnkit/train/trainable.h"
#include "attnkit/translate/model_dir.h"

// The architectures (config.json's "arch"): the one place that names each model. The
// translator, the training command and config.json go through here, and nothing else branches
// on the architecture.
namespace attnkit::translate {

// A fresh model of the config's architecture and options (initial weights; load them after).
std::unique_ptr<decoding::TranslationModel> build_model(const ModelConfig& config);
// The training loop's view of a model build_model made (which must outlive it).
std::unique_ptr<train::Trainable> make_trainable(decoding::TranslationModel& model,
                                                 const ModelConfig& config);
// One line saying what the model is, for training's summary.
std::string describe(const ModelConfig& config);
// The architecture's learning-rate warm-up by default (the Transformer's inverse square root).
int64_t default_warmup_steps(Arch arch);

}  // namespace attnkit::translate
