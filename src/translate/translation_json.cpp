#include "attnkit/translate/translation_json.h"

#include "attnkit/viz/plot.h"

namespace attnkit::translate {

using nlohmann::json;

json attention_layers_json(const translate::Translation& t) {
  return {{"cross", viz::rounded_heads(t.cross_layers)},
          {"decoder_self", viz::rounded_heads(t.decoder_self_layers)},
          {"decoder_inputs", translate::decoder_inputs(t)},
          {"encoder_self", viz::rounded_heads(t.encoder_self_layers)}};
}

json translation_json(const translate::Translation& t) {
  json j = {{"translation", t.text},
            {"source_tokens", t.source_tokens},
            {"target_tokens", t.target_tokens},
            {"attention", viz::rounded_rows(t.attention)},
            {"attention_rows", translate::attention_rows(t)},
            {"score", t.score}};
  if (!t.cross_layers.empty()) j["attention_layers"] = attention_layers_json(t);
  return j;
}

}  // namespace attnkit::translate
