#include "attnkit/io/state_dict.h"

#include <ATen/ATen.h>
#include <c10/util/irange.h>
#include <torch/csrc/autograd/grad_mode.h>

#include <map>
#include <sstream>

#include "attnkit/core/error.h"

namespace attnkit::io {
namespace {

std::string shape(const at::Tensor& t) {
  std::ostringstream s;
  s << t.sizes();
  return s.str();
}

std::string rename(const std::string& key, const LoadStateDictOptions& options) {
  for (const auto& [from, to] : options.renames)
    if (key.compare(0, from.size(), from) == 0) return to + key.substr(from.size());
  return key;
}

}  // namespace

TensorDict state_dict(const torch::nn::Module& module) {
  TensorDict out;
  for (const auto& p : module.named_parameters(/*recurse=*/true))
    out.emplace_back(p.key(), p.value());
  for (const auto& b : module.named_buffers(/*recurse=*/true)) out.emplace_back(b.key(), b.value());
  return out;
}

void load_state_dict(torch::nn::Module& module, const TensorDict& state,
                     const LoadStateDictOptions& options) {
  std::map<std::string, at::Tensor> targets;
  for (const auto& [name, tensor] : state_dict(module)) targets[name] = tensor;

  std::map<std::string, std::pair<std::string, at::Tensor>> given;  // module name -> (file key, t)
  std::vector<std::string> problems;
  for (const auto& [key, tensor] : state) {
    const std::string name = rename(key, options);
    const std::string shown = name == key ? "'" + key + "'" : "'" + key + "' (as '" + name + "')";
    auto target = targets.find(name);
    if (target == targets.end()) {
      if (options.strict) problems.push_back("unexpected key " + shown);
      continue;
    }
    if (!given.emplace(name, std::make_pair(key, tensor)).second) {
      problems.push_back("key " + shown + " appears twice");
      continue;
    }
    if (tensor.sizes() != target->second.sizes())
      problems.push_back("key " + shown + " has shape " + shape(tensor) +
                         " in the file but the module expects " + shape(target->second));
  }
  for (const auto& [name, tensor] : targets)
    if (!given.count(name))
      problems.push_back("missing key '" + name + "' (the module expects shape " + shape(tensor) +
                         ")");

  if (!problems.empty()) {
    std::string message = options.source + ": cannot load the state_dict:";
    for (const auto& p : problems) message += "\n  - " + p;
    throw Error(message);
  }
  torch::NoGradGuard no_grad;
  for (const auto& [name, entry] : given) targets[name].copy_(entry.second);
}

}  // namespace attnkit::io
