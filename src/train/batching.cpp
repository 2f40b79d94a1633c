#include "attnkit/train/batching.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <numeric>

#include "attnkit/data/corpus.h"
#include "attnkit/data/vocab.h"

namespace attnkit::train {

namespace {

// Where the batch starting at `b` ends (exclusive), within [b, end).
size_t batch_end(const std::vector<Example>& examples, const std::vector<size_t>& order, size_t b,
                 size_t end, size_t batch_size, size_t batch_tokens) {
  if (batch_tokens == 0) return std::min(end, b + batch_size);
  size_t longest = 0, e = b;
  for (; e < end; ++e) {
    const auto& x = examples[order[e]];
    const size_t side = std::max(x.source.size(), x.target.size() + 1);  // + <eos> / <sos>
    const size_t widest = std::max(longest, side);
    if (e > b && widest * (e - b + 1) > batch_tokens) break;
    longest = widest;
  }
  return e;
}

}  // namespace

std::vector<std::vector<size_t>> make_batches(const std::vector<Example>& examples,
                                              size_t batch_size, uint64_t seed, int64_t epoch,
                                              size_t batch_tokens) {
  batch_size = std::max<size_t>(1, batch_size);
  std::vector<size_t> order(examples.size());
  std::iota(order.begin(), order.end(), 0);
  const uint64_t epoch_seed = seed * 1000003ull + static_cast<uint64_t>(epoch);
  data::deterministic_shuffle(order, epoch_seed);
  const size_t pool = 50 * (batch_tokens > 0 ? std::max<size_t>(1, batch_tokens / 20) : batch_size);
  std::vector<std::vector<size_t>> batches;
  for (size_t start = 0; start < order.size(); start += pool) {
    const size_t end = std::min(order.size(), start + pool);
    std::stable_sort(order.begin() + start, order.begin() + end, [&](size_t a, size_t b) {
      const auto &x = examples[a], &y = examples[b];
      if (batch_tokens == 0) return x.source.size() < y.source.size();
      return std::make_pair(x.source.size(), x.target.size()) <
             std::make_pair(y.source.size(), y.target.size());
    });
    for (size_t b = start, e; b < end; b = e) {
      e = batch_end(examples, order, b, end, batch_size, batch_tokens);
      batches.emplace_back(order.begin() + b, order.begin() + e);
    }
  }
  std::vector<size_t> batch_order(batches.size());
  std::iota(batch_order.begin(), batch_order.end(), 0);
  data::deterministic_shuffle(batch_order, epoch_seed ^ 0x9E3779B97F4A7C15ull);
  std::vector<std::vector<size_t>> shuffled;
  shuffled.reserve(batches.size());
  for (size_t i : batch_order) shuffled.push_back(std::move(batches[i]));
  return shuffled;
}

Batch collate(const std::vector<Example>& examples, const std::vector<size_t>& members) {
  std::vector<std::vector<int64_t>> sources, inputs, outputs;
  Batch b;
  for (size_t i : members) {
    const auto& e = examples[i];
    sources.push_back(e.source);
    std::vector<int64_t> in = {data::Vocab::kSos}, out = e.target;
    in.insert(in.end(), e.target.begin(), e.target.end());
    out.push_back(data::Vocab::kEos);
    b.target_tokens += static_cast<int64_t>(out.size());
    inputs.push_back(std::move(in));
    outputs.push_back(std::move(out));
  }
  std::tie(b.source, b.lengths) = data::pad_batch(sources);
  b.target_in = data::pad_batch(inputs).first;
  b.target_out = data::pad_batch(outputs).first;
  return b;
}

}  // namespace attnkit::train
