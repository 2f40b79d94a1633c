#include "attnkit/translate/training.h"

#include "attnkit/translate/registry.h"
#include "attnkit/translate/translator.h"

namespace attnkit::translate {

train::TrainResult train_model(const ModelConfig& config,
                               std::shared_ptr<decoding::TranslationModel> model,
                               const data::Vocab& source_vocab, const data::Vocab& target_vocab,
                               const train::TrainData& data, train::TrainOptions options) {
  auto trainable = make_trainable(*model, config);
  Translator translator(config, model, source_vocab, target_vocab);
  if (!options.translate)
    options.translate = [&translator](const std::vector<std::string>& sources) {
      return greedy_texts(translator, sources);
    };
  return train::train_model(*trainable, data, options);
}

}  // namespace attnkit::translate
