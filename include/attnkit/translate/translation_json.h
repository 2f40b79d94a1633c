#pragma once

#include <nlohmann/json.hpp>

#include "attnkit/translate/translator.h"

// A translation as JSON, the one shape every output uses: /api/translate's answer
// (web/openapi.json's Translation, docs/api.md), `translate --format json` and the
// `--attention-out` files.
namespace attnkit::translate {

// {"translation", "source_tokens", "target_tokens", "attention", "attention_rows", "score",
// "alignment"}, plus "attention_layers" when the translation has a Transformer's per-layer maps.
nlohmann::json translation_json(const translate::Translation& t);

// Word alignments in the Pharaoh format that alignment tools read ("0-0 2-1 1-2"): for each
// target token j, "i-j" with i the source token its step attended to most. `rows` is the number
// of target tokens (the end-of-sentence row is not one).
std::string pharaoh_alignment(const at::Tensor& attention, size_t rows);

// A Transformer's per-layer maps (Translation::cross_layers ...): {"cross": [layer][head][row]
// [col], "decoder_self", "decoder_inputs" (its column labels), "encoder_self"}.
nlohmann::json attention_layers_json(const translate::Translation& t);

}  // namespace attnkit::translate
