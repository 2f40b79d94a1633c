#include "attnkit/io/weights.h"

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <filesystem>
#include <sstream>

#include "attnkit/core/error.h"
#include "attnkit/core/files.h"
#include "attnkit/io/pt_file.h"
#include "attnkit/io/state_dict.h"
#include "attnkit/kernels/gemm/quantize.h"

namespace attnkit::io {
namespace fs = std::filesystem;

void save_weights(torch::nn::Module& model, const std::string& path) {
  torch::serialize::OutputArchive archive;
  model.save(archive);
  save_archive(archive, path);  // a full disk keeps the previous weights
}

// Shapes of every parameter, by name.
std::vector<std::pair<std::string, std::vector<int64_t>>> shapes_of(torch::nn::Module& model) {
  std::vector<std::pair<std::string, std::vector<int64_t>>> out;
  for (const auto& p : model.named_parameters()) out.emplace_back(p.key(), p.value().sizes().vec());
  return out;
}

// After a load: every parameter keeps the shape config.json gave it (LibTorch's loader replaces
// a tensor of another shape silently, and the first step then fails on a bare shape error or
// translates wrongly), and holds finite numbers.
void check_loaded(torch::nn::Module& model, const std::string& path,
                  const std::vector<std::pair<std::string, std::vector<int64_t>>>& expected) {
  auto shape = [](const std::vector<int64_t>& s) {
    std::string out = "[";
    for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
    return out + "]";
  };
  const auto loaded = model.named_parameters();
  for (const auto& [name, want] : expected) {
    const auto& got = loaded[name];
    if (got.sizes().vec() != want)
      throw Error(path + ": parameter '" + name + "' is " + shape(got.sizes().vec()) +
                  " but config.json describes " + shape(want) +
                  " (the sizes and vocabularies there): the config does not belong to these "
                  "weights");
    if (!at::isfinite(got).all().item<bool>())
      throw Error(path + ": parameter '" + name + "' holds NaN or infinite values");
  }
}

void load_weights(torch::nn::Module& model, const std::string& path) {
  if (!fs::exists(path)) throw Error(path + ": missing model weights");
  const auto expected = shapes_of(model);
  try {
    torch::serialize::InputArchive archive;
    std::istringstream bytes(read_checked_archive(path));  // CRCs first
    archive.load_from(bytes);
    model.load(archive);
  } catch (const std::exception& e) {  // LibTorch's reader throws std::out_of_range too (fuzzing)
    throw Error(path + ": cannot load the weights into the configured model (" +
                first_line(e.what()) + ")");
  }
  check_loaded(model, path, expected);
}

namespace {

constexpr const char* kScaleSuffix = "_scale";

// What an int8 directory stores as int8 rows: the float matrices (weights of the linear layers,
// the GRUs, the attention projections, the embeddings); vectors (biases, norms) stay float.
bool quantized(const at::Tensor& t) { return t.dim() == 2 && t.scalar_type() == at::kFloat; }

}  // namespace

void save_quantized_weights(torch::nn::Module& model, const std::string& path) {
  TensorDict out;
  for (auto& [name, t] : state_dict(model)) {
    if (!quantized(t)) {
      out.emplace_back(name, t);
      continue;
    }
    auto q = kernels::quantize_rows(t.detach());
    out.emplace_back(name, q.values);
    out.emplace_back(name + kScaleSuffix, q.scales);
  }
  save_tensor_dict(path, out);
}

void load_quantized_weights(torch::nn::Module& model, const std::string& path) {
  if (!fs::exists(path)) throw Error(path + ": missing model weights");
  const auto stored = load_tensor_dict(path);
  TensorDict weights;
  for (const auto& [name, t] : stored) {
    if (t.scalar_type() != at::kChar) {
      const bool scale = name.size() > 6 && name.compare(name.size() - 6, 6, kScaleSuffix) == 0;
      if (!scale) weights.emplace_back(name, t);
      continue;
    }
    const auto& scales = find(stored, name + kScaleSuffix, path + " (int8 weight '" + name + "')");
    if (t.dim() != 2 || scales.dim() != 1 || scales.size(0) != t.size(0) ||
        scales.scalar_type() != at::kFloat)
      throw Error(path + ": '" + name +
                  "' must be int8 [rows, cols] with float32 [rows] scales in '" + name +
                  kScaleSuffix + "'");
    weights.emplace_back(name, kernels::dequantize_rows({t, scales}));
  }
  const auto expected = shapes_of(model);
  LoadStateDictOptions options;
  options.source = path;
  load_state_dict(model, weights, options);
  check_loaded(model, path, expected);
}

}  // namespace attnkit::io
