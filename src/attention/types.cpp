#include "attnkit/attention/types.h"

#include <algorithm>

#include "attnkit/core/error.h"

namespace attnkit {
namespace {

template <typename Enum, size_t N>
Enum parse(const std::string& name, const std::pair<const char*, Enum> (&table)[N],
           const char* what) {
  std::string key = name;
  std::replace(key.begin(), key.end(), '_', '-');
  std::transform(key.begin(), key.end(), key.begin(), ::tolower);
  std::string valid;
  for (const auto& [n, e] : table) {
    if (key == n) return e;
    valid += valid.empty() ? n : std::string(", ") + n;
  }
  throw Error("unknown " + std::string(what) + " '" + name + "' (valid: " + valid + ")");
}

const std::pair<const char*, ScoreKind> kScores[] = {
    {"concat", ScoreKind::Concat},     {"additive", ScoreKind::Additive},
    {"bahdanau", ScoreKind::Bahdanau}, {"scaled-dot", ScoreKind::ScaledDot},
    {"dot", ScoreKind::Dot},           {"general", ScoreKind::General}};
const std::pair<const char*, WeightingKind> kWeightings[] = {
    {"soft", WeightingKind::Soft}, {"hard", WeightingKind::Hard}, {"local", WeightingKind::Local}};
const std::pair<const char*, HardGradient> kHardGradients[] = {
    {"none", HardGradient::None},
    {"straight-through", HardGradient::StraightThrough},
    {"gumbel", HardGradient::Gumbel},
    {"reinforce", HardGradient::Reinforce}};

template <typename Enum, size_t N>
std::string name_of(Enum e, const std::pair<const char*, Enum> (&table)[N]) {
  for (const auto& [n, v] : table)
    if (v == e) return n;
  return "?";
}

template <typename Enum, size_t N>
std::vector<std::string> names_of(const std::pair<const char*, Enum> (&table)[N]) {
  std::vector<std::string> names;
  for (const auto& entry : table) names.emplace_back(entry.first);
  return names;
}

}  // namespace

std::string to_string(ScoreKind k) { return name_of(k, kScores); }
std::string to_string(WeightingKind k) { return name_of(k, kWeightings); }
std::string to_string(HardGradient k) { return name_of(k, kHardGradients); }
ScoreKind parse_score_kind(const std::string& n) { return parse(n, kScores, "score"); }
WeightingKind parse_weighting_kind(const std::string& n) {
  return parse(n, kWeightings, "weighting");
}
HardGradient parse_hard_gradient(const std::string& n) {
  return parse(n, kHardGradients, "hard gradient");
}
const std::vector<std::string>& score_kind_names() {
  static const auto names = names_of(kScores);
  return names;
}
const std::vector<std::string>& weighting_kind_names() {
  static const auto names = names_of(kWeightings);
  return names;
}
const std::vector<std::string>& hard_gradient_names() {
  static const auto names = names_of(kHardGradients);
  return names;
}

bool score_has_parameters(ScoreKind k) { return k != ScoreKind::Dot && k != ScoreKind::ScaledDot; }

}  // namespace attnkit
