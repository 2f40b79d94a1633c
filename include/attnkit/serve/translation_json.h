#pragma once

#include <nlohmann/json.hpp>

#include "attnkit/seq2seq/translator.h"

// A translation as JSON, the one shape every output uses: /api/translate's answer
// (web/openapi.json's Translation, docs/api.md), `translate --format json` and the
// `--attention-out` files.
namespace attnkit::serve {

// {"translation", "source_tokens", "target_tokens", "attention", "attention_rows", "score"}, plus
// "attention_layers" when the translation has a Transformer's per-layer maps.
nlohmann::json translation_json(const seq2seq::Translation& t);

// A Transformer's per-layer maps (Translation::cross_layers ...): {"cross": [layer][head][row]
// [col], "decoder_self", "decoder_inputs" (its column labels), "encoder_self"}.
nlohmann::json attention_layers_json(const seq2seq::Translation& t);

}  // namespace attnkit::serve
