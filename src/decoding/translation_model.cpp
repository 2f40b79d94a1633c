#include "attnkit/decoding/translation_model.h"

#include <c10/core/InferenceMode.h>
#include <torch/nn/module.h>

namespace attnkit::decoding {

std::vector<std::vector<Hypothesis>> search(TranslationModel& model, const at::Tensor& source,
                                            const at::Tensor& lengths, const SearchOptions& options,
                                            SearchStats* stats) {
  c10::InferenceMode inference;
  if (model.module().is_training()) model.module().eval();
  auto decoder = model.start(source, lengths, options);
  return search(*decoder, lengths, options, stats);
}

}  // namespace attnkit::decoding
