#pragma once

// Private: a value derived from a module's parameters (weights packed for a kernel), kept across
// searches and threads and rebuilt when training or loading changes a parameter: each
// parameter's buffer and version are the key, with `tag` (what else the value depends on, as the
// compute type). One entry per live module; entries of modules that are gone are dropped.

#include <torch/nn/module.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

namespace attnkit {

template <typename Value, typename ModuleImpl, typename Make>
std::shared_ptr<const Value> derived_weights(const std::shared_ptr<ModuleImpl>& module,
                                             const Make& make, uint32_t tag = 0) {
  struct Entry {
    std::weak_ptr<ModuleImpl> module;
    std::vector<std::pair<const void*, uint32_t>> weights;
    std::shared_ptr<const Value> value;
  };
  static std::mutex mutex;
  static std::vector<Entry> cache;
  Entry current{module, {{nullptr, tag}}, nullptr};
  for (const auto& p : module->parameters())
    current.weights.emplace_back(p.data_ptr(), p._version());
  std::lock_guard<std::mutex> lock(mutex);
  cache.erase(
      std::remove_if(cache.begin(), cache.end(), [](const Entry& e) { return e.module.expired(); }),
      cache.end());
  auto it = std::find_if(cache.begin(), cache.end(),
                         [&](const Entry& e) { return e.module.lock() == module; });
  if (it != cache.end() && it->weights == current.weights) return it->value;
  current.value = make();
  if (it != cache.end())
    *it = current;  // the weights changed: this module's one entry is replaced
  else
    cache.push_back(current);
  return current.value;
}

}  // namespace attnkit
