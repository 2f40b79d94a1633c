#include "attnkit/io/weights.h"

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include <filesystem>
#include <map>

#include "attnkit/core/error.h"
#include "attnkit/core/files.h"
#include "attnkit/io/pt_file.h"
#include "attnkit/io/state_dict.h"
#include "attnkit/kernels/gemm/quantize.h"

namespace attnkit::io {
namespace fs = std::filesystem;

void save_weights(torch::nn::Module& model, const std::string& path) {
  save_tensor_dict(path, state_dict(model));  // a full disk keeps the previous weights
}

namespace {

std::string shape_text(at::IntArrayRef s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

}  // namespace

std::string read_weights_file(const std::string& path) {
  if (!fs::exists(path)) throw Error(path + ": missing model weights");
  std::string bytes = read_checked_archive(path);  // sizes and CRCs first
  // A LibTorch (TorchScript) archive carries code records that its importer runs: attnkit
  // wrote its weights so before it read them with its own unpickler, and reads them no more.
  if (bytes.find("/constants.pkl") != std::string::npos ||
      bytes.find("/code/__torch__") != std::string::npos)
    throw Error(path +
                ": a LibTorch archive (model weights as attnkit 0.2 wrote them), which "
                "runs the code it carries when it is read; attnkit reads only torch.save "
                "dicts of tensors. Convert a model directory you trust: attnkit upgrade DIR");
  return bytes;
}

void assign(torch::nn::Module& model, const TensorDict& state, const std::string& path) {
  std::map<std::string, const at::Tensor*> stored;
  for (const auto& [name, t] : state) stored[name] = &t;
  for (const auto& [name, t] : state_dict(model)) {
    auto it = stored.find(name);
    if (it == stored.end())
      throw Error(path + ": has no tensor '" + name +
                  "', which config.json's model needs (the "
                  "config describes another model than these weights)");
    const at::Tensor& got = *it->second;
    if (got.sizes() != t.sizes())
      throw Error(path + ": parameter '" + name + "' is " + shape_text(got.sizes()) +
                  " but config.json describes " + shape_text(t.sizes()) +
                  " (the sizes and vocabularies there): the config does not belong to these "
                  "weights");
    if (got.scalar_type() != t.scalar_type())
      throw Error(path + ": '" + name + "' is " + std::string(c10::toString(got.scalar_type())) +
                  " where the model's is " + c10::toString(t.scalar_type()) +
                  (got.scalar_type() == at::kChar
                       ? " (int8 rows: give config.json \"compute_type\": \"int8\", as attnkit "
                         "quantize writes it)"
                       : ""));
    stored.erase(it);
  }
  if (!stored.empty())
    throw Error(path + ": holds '" + stored.begin()->first + "'" +
                (stored.size() > 1 ? " and " + std::to_string(stored.size() - 1) + " more" : "") +
                ", which the model config.json describes does not have (fewer layers, or "
                "another architecture, than these weights)");
  LoadStateDictOptions options;
  options.source = path;
  load_state_dict(model, state, options);
}

// Shapes of every parameter, by name.
Shapes shapes_of(torch::nn::Module& model) {
  Shapes out;
  for (const auto& p : model.named_parameters()) out.emplace_back(p.key(), p.value().sizes().vec());
  return out;
}

void check_loaded(torch::nn::Module& model, const std::string& path, const Shapes& expected) {
  const auto loaded = model.named_parameters();
  for (const auto& [name, want] : expected) {
    const auto& got = loaded[name];
    if (got.sizes().vec() != want)
      throw Error(path + ": parameter '" + name + "' is " + shape_text(got.sizes()) +
                  " but config.json describes " + shape_text(want) +
                  ": the config does not belong to these weights");
    if (!at::isfinite(got).all().item<bool>())
      throw Error(path + ": parameter '" + name + "' holds NaN or infinite values");
  }
}

void load_weights(torch::nn::Module& model, const std::string& path) {
  const auto expected = shapes_of(model);
  assign(model, load_tensor_dict_bytes(read_weights_file(path), path), path);
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
  const auto stored = load_tensor_dict_bytes(read_weights_file(path), path);
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
  assign(model, weights, path);
  check_loaded(model, path, expected);
}

}  // namespace attnkit::io
