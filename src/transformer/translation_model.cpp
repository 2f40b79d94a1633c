#include "attnkit/transformer/translation_model.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include "attnkit/transformer/search.h"

namespace attnkit::transformer {

std::unique_ptr<decoding::StepDecoder> TransformerTranslationModel::start(
    const at::Tensor& source, const at::Tensor& lengths, const decoding::SearchOptions&) {
  return std::make_unique<TransformerStepDecoder>(model_, source, lengths);
}

decoding::AttentionLayers TransformerTranslationModel::attention_layers(
    const std::vector<int64_t>& source, const std::vector<int64_t>& decoder_inputs) {
  c10::InferenceMode inference;
  if (model_->is_training()) model_->eval();
  const auto ids = at::tensor(source, at::kLong).unsqueeze(0);
  const auto lengths = at::tensor({static_cast<int64_t>(source.size())}, at::kLong);
  AttentionMaps maps;
  const auto encoded = model_->encode(ids, lengths, &maps);
  model_->decode(at::tensor(decoder_inputs, at::kLong).unsqueeze(0), encoded, &maps);
  auto first = [](const std::vector<at::Tensor>& layers) {  // [1, H, ., .] -> [H, ., .]
    std::vector<at::Tensor> out;
    for (const auto& l : layers) out.push_back(l[0].contiguous());
    return out;
  };
  return {first(maps.cross), first(maps.decoder_self), first(maps.encoder_self)};
}

}  // namespace attnkit::transformer
