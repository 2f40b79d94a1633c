#include "attnkit/translate/confidence.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>

#include "attnkit/core/error.h"
#include "attnkit/core/files.h"
#include "attnkit/data/tokenizer.h"

namespace attnkit::translate {
namespace {

// A source token is covered once the steps have given it this much attention in all, and
// attended to when one step gave it `kAttended`.
constexpr double kFloor = 1e-3;
constexpr double kAttended = 0.1;

bool is_word(const std::string& token) {
  return std::any_of(token.begin(), token.end(), [](char c) {
    return static_cast<unsigned char>(c) >= 0x80 || std::isalnum(static_cast<unsigned char>(c));
  });
}

// Words doubled ("IP IP") and bigrams seen before, per target token.
double repeats_of(const std::vector<std::string>& tokens) {
  if (tokens.empty()) return 0;
  size_t n = 0;
  std::map<std::pair<std::string, std::string>, int> bigrams;
  for (size_t i = 1; i < tokens.size(); ++i) {
    if (tokens[i] == tokens[i - 1] && is_word(tokens[i])) ++n;
    if (is_word(tokens[i]) && is_word(tokens[i - 1]) && bigrams[{tokens[i - 1], tokens[i]}]++ > 0)
      ++n;
  }
  return static_cast<double>(n) / static_cast<double>(tokens.size());
}

size_t placeholders_in(const std::vector<std::string>& tokens) {
  return static_cast<size_t>(std::count_if(
      tokens.begin(), tokens.end(), [](const std::string& t) { return data::is_placeholder(t); }));
}

}  // namespace

std::array<double, ConfidenceFeatures::kCount> ConfidenceFeatures::values() const {
  return {log_prob, coverage, uncovered, repeats, placeholders, length_ratio};
}

const std::array<const char*, ConfidenceFeatures::kCount>& ConfidenceFeatures::names() {
  static const std::array<const char*, kCount> n = {"log_prob", "coverage",     "uncovered",
                                                    "repeats",  "placeholders", "length_ratio"};
  return n;
}

ConfidenceFeatures confidence_features(const Translation& t) {
  ConfidenceFeatures f;
  f.log_prob = t.score;
  const int64_t rows = static_cast<int64_t>(t.target_tokens.size());
  const int64_t cols = static_cast<int64_t>(t.source_tokens.size());
  if (cols > 0 && rows > 0 && t.attention.defined() && t.attention.dim() == 2 &&
      t.attention.size(0) >= rows && t.attention.size(1) >= cols) {
    // [source tokens]: the attention each got over the steps that wrote a target token.
    const at::Tensor a = t.attention.slice(0, 0, rows).slice(1, 0, cols).to(at::kDouble);
    const at::Tensor total = a.sum(0), most = std::get<0>(a.max(0));
    f.coverage = total.clamp(kFloor, 1.0).log().mean().item<double>();
    f.uncovered = (most < kAttended).to(at::kDouble).mean().item<double>();
  } else if (cols > 0) {
    f.coverage = std::log(kFloor);  // nothing written: nothing covered
    f.uncovered = 1;
  }
  f.repeats = repeats_of(t.target_tokens);
  f.placeholders = std::abs(static_cast<double>(placeholders_in(t.source_tokens)) -
                            static_cast<double>(placeholders_in(t.target_tokens)));
  f.length_ratio = std::log((static_cast<double>(rows) + 1) / (static_cast<double>(cols) + 1));
  return f;
}

Confidence Confidence::fit(const std::vector<ConfidenceFeatures>& x,
                           const std::vector<double>& chrf) {
  constexpr size_t K = ConfidenceFeatures::kCount;
  const size_t n = x.size();
  if (n != chrf.size())
    throw Error("confidence: " + std::to_string(n) + " translations for " +
                std::to_string(chrf.size()) + " scores");
  if (n < K + 1)
    throw Error("confidence: " + std::to_string(n) + " pairs; the fit needs at least " +
                std::to_string(K + 1));
  Confidence c;
  c.pairs_ = n;
  at::Tensor X = at::empty({static_cast<int64_t>(n), static_cast<int64_t>(K)}, at::kDouble);
  auto xs = X.accessor<double, 2>();
  for (size_t i = 0; i < n; ++i) {
    const auto v = x[i].values();
    for (size_t k = 0; k < K; ++k) xs[i][k] = v[k];
  }
  const at::Tensor mean = X.mean(0), sd = (X - mean).pow(2).mean(0).sqrt();
  const at::Tensor scale = at::where(sd > 1e-12, sd, at::ones_like(sd));
  const at::Tensor Z = (X - mean) / scale;
  const at::Tensor y =
      at::from_blob(const_cast<double*>(chrf.data()), {static_cast<int64_t>(n)}, at::kDouble)
          .clone();
  const double y_mean = y.mean().item<double>();
  // Ridge: a feature that is constant, or two that move together, must not blow the weights up.
  const at::Tensor A = Z.t().mm(Z) + 1e-3 * static_cast<double>(n) * at::eye(K, at::kDouble);
  const at::Tensor b = Z.t().mv(y - y_mean);
  const at::Tensor w = at::linalg_solve(A, b.unsqueeze(1)).squeeze(1);
  for (size_t k = 0; k < K; ++k) {
    c.mean_[k] = mean[static_cast<int64_t>(k)].item<double>();
    c.scale_[k] = scale[static_cast<int64_t>(k)].item<double>();
    c.weight_[k] = w[static_cast<int64_t>(k)].item<double>();
  }
  c.bias_ = y_mean;
  c.fitted_ = true;
  return c;
}

double Confidence::operator()(const ConfidenceFeatures& f) const {
  if (!fitted_) return 0;
  const auto v = f.values();
  double chrf = bias_;
  for (size_t k = 0; k < v.size(); ++k) chrf += weight_[k] * (v[k] - mean_[k]) / scale_[k];
  return std::clamp(chrf / 100.0, 0.0, 1.0);
}

std::string Confidence::to_json() const {
  nlohmann::json j;
  j["predicts"] = "sentence chrF2 / 100";
  j["features"] = ConfidenceFeatures::names();
  j["mean"] = mean_;
  j["scale"] = scale_;
  j["weight"] = weight_;
  j["bias"] = bias_;
  j["pairs"] = pairs_;
  return j.dump(2) + "\n";
}

Confidence Confidence::from_json(const std::string& text, const std::string& where) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw Error(where + ": not JSON: " + e.what());
  }
  Confidence c;
  try {
    const auto names = j.at("features").get<std::vector<std::string>>();
    const auto& want = ConfidenceFeatures::names();
    if (names != std::vector<std::string>(want.begin(), want.end()))
      throw Error(where + ": features " + j.at("features").dump() + ", this attnkit computes " +
                  nlohmann::json(want).dump() + " (run attnkit calibrate again)");
    c.mean_ = j.at("mean").get<decltype(c.mean_)>();
    c.scale_ = j.at("scale").get<decltype(c.scale_)>();
    c.weight_ = j.at("weight").get<decltype(c.weight_)>();
    c.bias_ = j.at("bias").get<double>();
    c.pairs_ = j.at("pairs").get<size_t>();
  } catch (const nlohmann::json::exception& e) {
    throw Error(where + ": not a confidence file: " + e.what());
  }
  for (double s : c.scale_)
    if (!(s > 0) || !std::isfinite(s)) throw Error(where + ": a feature's scale is not positive");
  c.fitted_ = true;
  return c;
}

Confidence Confidence::load(const std::string& model_dir) {
  const std::string path = (std::filesystem::path(model_dir) / kConfidenceFile).string();
  if (!std::filesystem::exists(path)) return {};
  return from_json(read_small_file(path, size_t(1) << 20, "a confidence file"), path);
}

void Confidence::save(const std::string& model_dir) const {
  write_file_atomic((std::filesystem::path(model_dir) / kConfidenceFile).string(), to_json());
}

double pearson(const std::vector<double>& a, const std::vector<double>& b) {
  const size_t n = std::min(a.size(), b.size());
  if (n < 2) return 0;
  const double ma = std::accumulate(a.begin(), a.begin() + n, 0.0) / n;
  const double mb = std::accumulate(b.begin(), b.begin() + n, 0.0) / n;
  double sab = 0, saa = 0, sbb = 0;
  for (size_t i = 0; i < n; ++i) {
    sab += (a[i] - ma) * (b[i] - mb);
    saa += (a[i] - ma) * (a[i] - ma);
    sbb += (b[i] - mb) * (b[i] - mb);
  }
  return saa > 0 && sbb > 0 ? sab / std::sqrt(saa * sbb) : 0;
}

}  // namespace attnkit::translate
