#include "attnkit/train/averaging.h"

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "attnkit/core/error.h"
#include "attnkit/io/state_dict.h"
#include "attnkit/io/weights.h"

namespace attnkit::train {
namespace fs = std::filesystem;

namespace {

constexpr const char* kPrefix = "step-";
constexpr const char* kSuffix = ".pt";

// The step of a kept file's name, or -1 for any other file.
int64_t step_of(const std::string& name) {
  const std::string prefix = kPrefix, suffix = kSuffix;
  if (name.size() <= prefix.size() + suffix.size() || name.rfind(prefix, 0) != 0 ||
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
    return -1;
  const auto digits = name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  if (!std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }) ||
      digits.size() > 18)
    return -1;
  return std::stoll(digits);
}

}  // namespace

std::string kept_weights_path(const std::string& model_dir, int64_t step) {
  char name[40];
  std::snprintf(name, sizeof name, "%s%08lld%s", kPrefix, static_cast<long long>(step), kSuffix);
  return (fs::path(model_dir) / "checkpoints" / name).string();
}

std::vector<std::string> kept_weights(const std::string& model_dir) {
  const auto dir = fs::path(model_dir) / "checkpoints";
  std::vector<std::pair<int64_t, std::string>> found;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return {};
  for (const auto& entry : fs::directory_iterator(dir)) {
    const int64_t step = step_of(entry.path().filename().string());
    if (step >= 0 && entry.is_regular_file()) found.emplace_back(step, entry.path().string());
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> files;
  for (auto& f : found) files.push_back(std::move(f.second));
  return files;
}

void keep_weights(Trainable& model, const std::string& model_dir, int64_t step, int64_t keep) {
  if (keep <= 0) return;
  fs::create_directories(fs::path(model_dir) / "checkpoints");
  io::save_weights(model.module(), kept_weights_path(model_dir, step));
  const auto files = kept_weights(model_dir);
  for (size_t i = 0; i + static_cast<size_t>(keep) < files.size(); ++i) fs::remove(files[i]);
}

void average_weights(torch::nn::Module& module, const std::vector<std::string>& files) {
  if (files.empty()) throw Error("average: no weight files to average");
  io::TensorDict sums;
  for (size_t f = 0; f < files.size(); ++f) {
    io::load_weights(module, files[f]);
    const auto weights = io::state_dict(module);
    if (f == 0) {
      for (const auto& [name, t] : weights)
        sums.emplace_back(name, t.is_floating_point() ? t.to(at::kDouble) : t.clone());
      continue;
    }
    for (size_t i = 0; i < weights.size(); ++i) {
      const auto& t = weights[i].second;
      if (t.is_floating_point())
        sums[i].second.add_(t.to(at::kDouble));
      else if (!at::equal(t, sums[i].second))
        throw Error(files[f] + ": " + weights[i].first + " differs from " + files[0] +
                    "'s, and it cannot be averaged (not floating point)");
    }
  }
  at::NoGradGuard no_grad;
  const auto weights = io::state_dict(module);
  for (size_t i = 0; i < weights.size(); ++i) {
    auto t = weights[i].second;
    if (t.is_floating_point()) t.copy_(sums[i].second / static_cast<double>(files.size()));
  }
}

}  // namespace attnkit::train
