#include "api.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "attnkit/attention/functional.h"
#include "attnkit/attention/types.h"
#include "attnkit/core/error.h"
#include "attnkit/data/text.h"
#include "attnkit/viz/plot.h"

namespace attnkit::serve {

using nlohmann::json;

namespace {

at::Tensor matrix_from(const json& j, const char* name, size_t max_elements) {
  if (!j.is_array() || j.empty())
    throw BadRequest{400, std::string(name) + " must be a non-empty list of rows"};
  const size_t cols = j[0].is_array() ? j[0].size() : 0;
  if (cols == 0 || j.size() * cols > max_elements)
    throw BadRequest{400, std::string(name) + " must be a matrix with 1 to " +
                              std::to_string(max_elements) + " numbers"};
  std::vector<float> values;
  for (const auto& row : j) {
    if (!row.is_array() || row.size() != cols)
      throw BadRequest{
          400, std::string(name) + ": every row needs " + std::to_string(cols) + " numbers"};
    for (const auto& v : row) {
      if (!v.is_number()) throw BadRequest{400, std::string(name) + " must hold numbers only"};
      // Converting a double beyond float's range is undefined behaviour, not infinity.
      const double x = v.get<double>();
      if (!(std::abs(x) <= std::numeric_limits<float>::max()))
        throw BadRequest{400, std::string(name) + " holds " + v.dump() +
                                  ", beyond the range of float32 (3.4e38)"};
      values.push_back(static_cast<float>(x));
    }
  }
  return at::tensor(values).reshape({static_cast<int64_t>(j.size()), static_cast<int64_t>(cols)});
}

// body[name] as a string, or `fallback` when absent; another JSON type is the request's fault.
std::string string_field(const json& body, const char* name, const std::string& fallback) {
  if (!body.contains(name)) return fallback;
  if (!body[name].is_string())
    throw BadRequest{400, std::string("'") + name + "' must be a string"};
  return body[name].get<std::string>();
}

// body[name] as an integer in [lo, hi], or `fallback` when absent.
int int_field(const json& body, const char* name, int fallback, int lo, int hi) {
  if (!body.contains(name)) return fallback;
  const auto& v = body[name];
  const std::string range = std::to_string(lo) + ".." + std::to_string(hi);
  if (!v.is_number_integer())
    throw BadRequest{400, std::string("'") + name + "' must be an integer in " + range};
  // Compared as JSON's own integer, so that 4294967297 is not read as 1.
  const bool in_range = v.is_number_unsigned() ? v.get<uint64_t>() <= static_cast<uint64_t>(hi) &&
                                                     static_cast<int64_t>(v.get<uint64_t>()) >= lo
                                               : v.get<int64_t>() >= lo && v.get<int64_t>() <= hi;
  if (!in_range) throw BadRequest{400, std::string("'") + name + "' must be in " + range};
  return static_cast<int>(v.get<int64_t>());
}

// A finite number in [lo, hi] (open at lo when `open_lo`).
double number_field(const json& body, const char* name, double fallback, double lo, double hi,
                    bool open_lo) {
  if (!body.contains(name)) return fallback;
  const auto& v = body[name];
  const std::string range =
      std::string(open_lo ? "(" : "[") + json(lo).dump() + ", " + json(hi).dump() + "]";
  const double x = v.is_number() ? v.get<double>() : std::nan("");
  if (!std::isfinite(x) || x < lo || x > hi || (open_lo && x == lo))
    throw BadRequest{400, std::string("'") + name + "' must be a number in " + range};
  return x;
}

}  // namespace

json parse_body(const std::string& body) {
  try {
    auto j = json::parse(body);
    if (!j.is_object()) throw BadRequest{400, "the body must be a JSON object"};
    return j;
  } catch (const json::exception& e) {  // parse_error, and out_of_range for 1e400 (a 500 once)
    throw BadRequest{400, std::string("invalid JSON: ") + e.what()};
  }
}

json attend(const json& body) {
  const std::string mechanism = string_field(body, "mechanism", "soft");
  const std::string score = string_field(body, "score", mechanism == "self" ? "scaled-dot" : "dot");
  if (mechanism != "soft" && mechanism != "hard" && mechanism != "self")
    throw BadRequest{400, "mechanism must be soft, hard or self"};
  if (score_has_parameters(parse_score_kind(score)))
    throw BadRequest{400, "score must be one without parameters: dot or scaled-dot"};
  constexpr size_t kMax = 4096;
  at::Tensor q, k, v;
  if (mechanism == "self") {
    q = k = v = matrix_from(body.contains("x") ? body["x"] : body.value("q", json()), "x", kMax);
  } else {
    q = matrix_from(body.value("q", json()), "q", kMax);
    k = matrix_from(body.value("k", json()), "k", kMax);
    v = body.contains("v") ? matrix_from(body["v"], "v", kMax) : k;
  }
  if (q.size(1) != k.size(1))
    throw BadRequest{400, "q and k need the same number of columns (" + std::to_string(q.size(1)) +
                              " vs " + std::to_string(k.size(1)) + ")"};
  if (k.size(0) != v.size(0))
    throw BadRequest{400, "k and v need the same number of rows (" + std::to_string(k.size(0)) +
                              " vs " + std::to_string(v.size(0)) + ")"};
  // The answer grows with Tq x Tk (scores and weights) and Tq x Dv (output): bounded, so that a
  // 32 KB request cannot ask for a 184 MB answer and seconds of CPU.
  constexpr int64_t kMaxCells = 65536;
  if (q.size(0) * k.size(0) > kMaxCells || q.size(0) * v.size(1) > kMaxCells)
    throw BadRequest{413,
                     "the answer would have " +
                         std::to_string(std::max(q.size(0) * k.size(0), q.size(0) * v.size(1))) +
                         " numbers per matrix; the limit is " + std::to_string(kMaxCells)};
  auto q3 = q.unsqueeze(0), k3 = k.unsqueeze(0), v3 = v.unsqueeze(0);
  auto scores =
      score == "dot" ? functional::dot_score(q3, k3) : functional::scaled_dot_score(q3, k3);
  auto weights =
      mechanism == "hard" ? functional::hard_weights(scores) : functional::soft_weights(scores);
  auto output = functional::context(weights, v3);
  // Finite inputs can still overflow: 3e38 squared is infinity, and JSON has no number for it.
  for (const auto& [t, what] : {std::pair{scores, "the scores"}, std::pair{output, "the output"}})
    if (!at::isfinite(t).all().item<bool>())
      throw BadRequest{400, std::string(what) +
                                " overflow float32: " + (mechanism == "self" ? "x" : "q and k") +
                                " hold values too large to multiply"};
  return {{"mechanism", mechanism},
          {"score", score},
          {"scores", viz::rounded_rows(scores[0])},
          {"weights", viz::rounded_rows(weights[0])},
          {"output", viz::rounded_rows(output[0])}};
}

TranslateRequest translate_request(const json& body, size_t max_text_bytes, int max_beam) {
  if (!body.contains("text") || !body["text"].is_string())
    throw BadRequest{400, "'text' must be a string"};
  TranslateRequest r;
  r.text = body["text"].get<std::string>();
  if (r.text.size() > max_text_bytes)
    throw BadRequest{413, "text is " + std::to_string(r.text.size()) + " bytes; the limit is " +
                              std::to_string(max_text_bytes)};
  if (!text::valid_utf8(r.text)) throw BadRequest{400, "text is not valid UTF-8"};
  r.beam = int_field(body, "beam", 5, 1, max_beam);
  if (body.contains("target_prefix")) {
    if (!body["target_prefix"].is_string())
      throw BadRequest{400, "'target_prefix' must be a string"};
    r.target_prefix = body["target_prefix"].get<std::string>();
    if (r.target_prefix.size() > max_text_bytes)
      throw BadRequest{413, "target_prefix is " + std::to_string(r.target_prefix.size()) +
                                " bytes; the limit is " + std::to_string(max_text_bytes)};
    if (!text::valid_utf8(r.target_prefix))
      throw BadRequest{400, "target_prefix is not valid UTF-8"};
  }
  r.alternatives = int_field(body, "alternatives", 0, 0, max_beam);
  r.sampling_topk = int_field(body, "sampling_topk", 1, 0, 1000000);
  r.sampling_topp = number_field(body, "sampling_topp", 1, 0, 1, /*open_lo=*/true);
  r.temperature = number_field(body, "temperature", 1, 0, 100, /*open_lo=*/true);
  r.seed = int_field(body, "seed", 0, 0, 2147483647);
  if (r.sampling_topk != 1 && r.beam != 1)
    throw BadRequest{400, "sampling ('sampling_topk' other than 1) needs 'beam': 1"};
  return r;
}

PoRequest po_request(const std::multimap<std::string, std::string>& query, int max_beam) {
  PoRequest r;
  const auto get = [&](const char* key, std::string& out) {
    if (auto it = query.find(key); it != query.end()) out = it->second;
  };
  get("name", r.name);
  get("lang", r.lang);
  if (r.name.empty() || r.name.size() > 255 || !text::valid_utf8(r.name))
    throw BadRequest{400, "'name' must be a file name of 1 to 255 bytes of UTF-8"};
  if (r.lang.size() > 64 || r.lang.find_first_of(" \t\n\"") != std::string::npos)
    throw BadRequest{400, "'lang' must be a language code such as zh_CN"};
  std::string beam;
  get("beam", beam);
  if (!beam.empty()) {
    const std::string range = "1.." + std::to_string(max_beam);
    if (beam.size() > 3 || beam.find_first_not_of("0123456789") != std::string::npos ||
        std::stoi(beam) < 1 || std::stoi(beam) > max_beam)
      throw BadRequest{400, "'beam' must be an integer in " + range};
    r.beam = std::stoi(beam);
  }
  return r;
}

namespace {

std::string base64(const std::string& bytes) {
  static const char* digits = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (size_t i = 0; i < bytes.size(); i += 3) {
    const size_t n = std::min<size_t>(3, bytes.size() - i);
    uint32_t v = 0;
    for (size_t k = 0; k < 3; ++k)
      v = (v << 8) | (k < n ? static_cast<unsigned char>(bytes[i + k]) : 0u);
    for (size_t k = 0; k < 4; ++k) out += k <= n ? digits[(v >> (18 - 6 * k)) & 63] : '=';
  }
  return out;
}

}  // namespace

json po_answer(const data::PoCatalog& catalog, const po::PretranslateReport& report) {
  json entries = json::array();
  for (const auto& f : report.filled) {
    const auto& e = catalog.entries()[f.entry];
    json j = {{"line", e.line},
              {"msgctxt", e.has_context ? json(e.context) : json(nullptr)},
              {"msgid", e.msgid},
              {"msgstr", e.msgstr},
              {"origin", po::to_string(f.origin)},
              {"intact", f.survived},
              {"segments", f.segments}};
    if (e.plural()) j["msgid_plural"] = e.msgid_plural;
    if (f.origin == po::FilledEntry::Origin::Memory) j["memory"] = f.memory;
    if (f.confidence >= 0) j["confidence"] = f.confidence;
    entries.push_back(std::move(j));
  }
  json segments = json::array();
  for (size_t s = 0; s < report.translations.size(); ++s) {
    segments.push_back(
        {{"input", report.inputs[s]}, {"output", translation_json(report.translations[s])}});
  }
  return {{"catalog_base64", base64(catalog.write())},
          {"charset", catalog.charset()},
          {"report",
           {{"entries", report.entries},
            {"translated", report.translated},
            {"memory", report.memory},
            {"model", report.model},
            {"copied", report.copied},
            {"segments", report.segments},
            {"intact", report.survived}}},
          {"entries", std::move(entries)},
          {"segments", std::move(segments)}};
}

std::pair<int, json> error_answer(std::exception_ptr error) {
  try {
    std::rethrow_exception(error);
  } catch (const BadRequest& e) {
    return {e.status, {{"error", e.message}}};
  } catch (const Error& e) {
    return {400, {{"error", e.what()}}};
  } catch (const c10::Error& e) {
    return {400, {{"error", e.what_without_backtrace()}}};
  } catch (const std::exception& e) {
    return {500, {{"error", e.what()}}};
  }
}

}  // namespace attnkit::serve
