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
// sorted by length inside a pool, chunked, and the batches shuffled. With batch_tokens > 0 a
// chunk takes sentences while (sentences x the longest side so far) stays within batch_tokens
// (at least one sentence); pools then hold 50 x batch_tokens / 20 sentences.
std::vector<std::vector<size_t>> make_batches(const std::vector<Example>& examples,
                                              size_t batch_size, uint64_t seed, int64_t epoch,
                                              size_t batch_tokens = 0);

struct Batch {
  at::Tensor source;      // [B, S]
  at::Tensor lengths;     // [B]
  at::Tensor target_in;   // [B, T + 1]: <sos> y
  at::Tensor target_out;  // [B, T + 1]: y <eos>
  int64_t target_tokens = 0;
};
Batch collate(const std::vector<Example>& examples, const std::vector<size_t>& members);

}  // namespace attnkit::train
