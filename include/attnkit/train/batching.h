#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace attnkit::train {

// One tokenised sentence pair as vocabulary ids (no <sos>/<eos>).
struct Example {
  std::vector<int64_t> source, target;
};

// Length-bucketed batches for one epoch, a pure function of (examples, batch size, seed,
// epoch): the order is reshuffled each epoch, yet reproducible, which is what lets a resumed
// run continue exactly where it stopped. Examples are shuffled, cut into pools of 50 batches,
// sorted by source length inside a pool, chunked, and the batches shuffled.
std::vector<std::vector<size_t>> make_batches(const std::vector<Example>& examples,
                                              size_t batch_size, uint64_t seed, int64_t epoch);

struct Batch {
  at::Tensor source;      // [B, S]
  at::Tensor lengths;     // [B]
  at::Tensor target_in;   // [B, T + 1]: <sos> y
  at::Tensor target_out;  // [B, T + 1]: y <eos>
  int64_t target_tokens = 0;
};
Batch collate(const std::vector<Example>& examples, const std::vector<size_t>& members);

}  // namespace attnkit::train
