#include "attnkit/rnn/translation_model.h"

#include "attnkit/rnn/search.h"

namespace attnkit::rnn {

std::unique_ptr<decoding::StepDecoder> RnnTranslationModel::start(
    const at::Tensor& source, const at::Tensor& lengths, const decoding::SearchOptions& options) {
  return std::make_unique<RnnStepDecoder>(model_, source, lengths, options);
}

}  // namespace attnkit::rnn
