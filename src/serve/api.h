#pragma once

// Private to src/serve: the API's request handling without sockets, JSON in and JSON out, so that
// the server's routes stay thin and tests/fuzz/fuzz_server_api.cpp can drive it with any bytes.

#include <exception>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "attnkit/data/po_catalog.h"
#include "attnkit/po/pretranslate.h"
#include "attnkit/translate/translation_json.h"
#include "attnkit/translate/translator.h"

namespace attnkit::serve {

// A request problem: becomes a 4xx answer with this message.
struct BadRequest {
  int status;
  std::string message;
};

// The body as a JSON object; anything else is a BadRequest (400).
nlohmann::json parse_body(const std::string& body);

// POST /api/attend: the notes' mechanisms on the request's matrices, with the answer's size
// bounded (413 past 65536 numbers in a matrix).
nlohmann::json attend(const nlohmann::json& body);

// POST /api/translate's fields, checked: "text" (UTF-8, at most max_text_bytes; 413 past it) and
// "beam" (an integer in 1..max_beam, 5 when absent).
struct TranslateRequest {
  std::string text;
  int beam = 5;
  std::string target_prefix;  // the start the translation must have ("" for none)
  int alternatives = 0;       // that many alternatives after the prefix (0: none)
  // Sampling (greedy search only): decoding::SearchOptions' fields.
  int sampling_topk = 1;
  double sampling_topp = 1, temperature = 1;
  int seed = 0;
};
TranslateRequest translate_request(const nlohmann::json& body, size_t max_text_bytes, int max_beam);

// POST /api/po's query: ?name= (the file's name, for error messages; "upload.po" when absent),
// ?lang= (the target language; the header's Language when absent), ?beam= (1..max_beam, 5).
// The body is the catalog's bytes, in its own charset.
struct PoRequest {
  std::string name = "upload.po", lang;
  int beam = 5;
};
PoRequest po_request(const std::multimap<std::string, std::string>& query, int max_beam);

// The answer: the filled catalog's bytes ("catalog_base64", in "charset"), the report, each
// filled entry with its suggestion and origin, and what the model read and wrote for each
// segment ({"input": the protected line, "output": its Translation, attention included}) -
// web/openapi.json's PoAnswer.
nlohmann::json po_answer(const data::PoCatalog& catalog, const po::PretranslateReport& report);

// What a handler that threw answers: the request's faults 4xx with their message, ours 500.
std::pair<int, nlohmann::json> error_answer(std::exception_ptr error);

}  // namespace attnkit::serve
