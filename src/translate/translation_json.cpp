#include "attnkit/translate/translation_json.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "attnkit/viz/plot.h"

namespace attnkit::translate {

using nlohmann::json;

json attention_layers_json(const translate::Translation& t) {
  return {{"cross", viz::rounded_heads(t.cross_layers)},
          {"decoder_self", viz::rounded_heads(t.decoder_self_layers)},
          {"decoder_inputs", translate::decoder_inputs(t)},
          {"encoder_self", viz::rounded_heads(t.encoder_self_layers)}};
}

std::string pharaoh_alignment(const at::Tensor& attention, size_t rows) {
  std::string out;
  if (!attention.defined() || attention.dim() != 2 || attention.size(1) == 0) return out;
  const int64_t n = std::min<int64_t>(static_cast<int64_t>(rows), attention.size(0));
  const auto best = attention.slice(0, 0, n).argmax(1);
  for (int64_t j = 0; j < n; ++j)
    out += (j ? " " : "") + std::to_string(best[j].item<int64_t>()) + "-" + std::to_string(j);
  return out;
}

json translation_json(const translate::Translation& t) {
  json j = {{"translation", t.text},
            {"source_tokens", t.source_tokens},
            {"target_tokens", t.target_tokens},
            {"attention", viz::rounded_rows(t.attention)},
            {"attention_rows", translate::attention_rows(t)},
            {"score", t.score},
            {"alignment", pharaoh_alignment(t.attention, t.target_tokens.size())}};
  if (!t.cross_layers.empty()) j["attention_layers"] = attention_layers_json(t);
  return j;
}

}  // namespace attnkit::translate
