#pragma once

#include <memory>

#include "attnkit/data/vocab.h"
#include "attnkit/decoding/translation_model.h"
#include "attnkit/train/trainer.h"
#include "attnkit/translate/model_dir.h"

// Training a model of any architecture, validated as it will translate: the training loop
// (train/trainer.h) over the architecture's Trainable, with validation BLEU from greedy
// translations by a Translator that shares the weights being trained.
namespace attnkit::translate {

train::TrainResult train_model(const ModelConfig& config,
                               std::shared_ptr<decoding::TranslationModel> model,
                               const data::Vocab& source_vocab, const data::Vocab& target_vocab,
                               const train::TrainData& data, train::TrainOptions options);

}  // namespace attnkit::translate
