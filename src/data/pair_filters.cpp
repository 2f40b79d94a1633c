#include "attnkit/data/pair_filters.h"

#include <unicode/uchar.h>
#include <unicode/uscript.h>

#include <algorithm>
#include <cmath>

#include "attnkit/data/text.h"

namespace attnkit::data {
namespace {

// gettext's modifiers for a script ("sr@latin") as ICU's script subtags ("sr_Latn").
std::string icu_locale(const std::string& lang) {
  const auto at = lang.find('@');
  if (at == std::string::npos) return lang;
  const std::string base = lang.substr(0, at), modifier = lang.substr(at + 1);
  if (modifier == "latin") return base + "_Latn";
  if (modifier == "cyrillic") return base + "_Cyrl";
  return base;
}

double chars(const std::string& s) { return static_cast<double>(text::decode(s).size()); }

}  // namespace

ScriptCheck::ScriptCheck(const std::string& lang) {
  UErrorCode status = U_ZERO_ERROR;
  UScriptCode codes[8];
  const int n = uscript_getCode(icu_locale(lang).c_str(), codes, 8, &status);
  if (U_FAILURE(status) || n <= 0) return;
  for (int i = 0; i < n; ++i) scripts_.push_back(codes[i]);
  applies_ = std::find(scripts_.begin(), scripts_.end(), USCRIPT_LATIN) == scripts_.end();
}

bool ScriptCheck::accepts(std::string_view target) const {
  if (!applies_) return true;
  for (char32_t c : text::decode(target)) {
    if (!u_isalpha(static_cast<UChar32>(c))) continue;
    UErrorCode status = U_ZERO_ERROR;
    const int script = uscript_getScript(static_cast<UChar32>(c), &status);
    if (U_SUCCESS(status) && std::find(scripts_.begin(), scripts_.end(), script) != scripts_.end())
      return true;
  }
  return false;
}

double median_length_ratio(const std::vector<Pair>& pairs) {
  std::vector<double> ratios;
  ratios.reserve(pairs.size());
  for (const auto& p : pairs)
    if (!p.source.empty()) ratios.push_back(chars(p.target) / chars(p.source));
  if (ratios.empty()) return 1;
  auto mid = ratios.begin() + static_cast<long>(ratios.size() / 2);
  std::nth_element(ratios.begin(), mid, ratios.end());
  return *mid;
}

bool length_ratio_outlier(const Pair& p, double median, double factor, size_t min_source_chars) {
  if (factor <= 0) return false;
  const double n = chars(p.source);
  if (n < static_cast<double>(min_source_chars)) return false;
  const double ratio = chars(p.target) / n;
  return ratio <= 0 || std::abs(std::log(ratio / median)) > std::log(factor);
}

size_t filter_length_ratio(std::vector<Pair>& pairs, double factor, size_t min_source_chars) {
  if (pairs.empty() || factor <= 0) return 0;
  const double median = median_length_ratio(pairs);
  const size_t before = pairs.size();
  pairs.erase(std::remove_if(pairs.begin(), pairs.end(),
                             [&](const Pair& p) {
                               return length_ratio_outlier(p, median, factor, min_source_chars);
                             }),
              pairs.end());
  return before - pairs.size();
}

}  // namespace attnkit::data
