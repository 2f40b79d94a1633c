#pragma once

#include <nlohmann/json.hpp>

#include "attnkit/translate/translator.h"

// A translation as JSON, the one shape every output uses: /api/translate's answer
// (web/openapi.json's Translation, docs/api.md), `translate --format json` and the
// `--attention-out` files.
namespace attnkit::translate {

// {"translation", "source_tokens", "target_tokens", "attention", "attention_rows", "score"}, plus
// "attention_layers" when the translation has a Transformer's per-layer maps.
nlohmann::json translation_json(const translate::Translation& t);

// A Transformer's per-layer maps (Translation::cross_layers ...): {"cross": [layer][head][row]
// [col], "decoder_self", "decoder_inputs" (its column labels), "encoder_self"}.
nlohmann::json attention_layers_json(const translate::Translation& t);

}  // namespace attnkit::translate
