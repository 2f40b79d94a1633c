#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "attnkit/data/alignment.h"
#include "attnkit/data/corpus.h"

// Synthetic translation tasks with known alignments: a tiny attention model should learn them
// in seconds, with its attention following the gold alignment.
namespace attnkit::data {

struct SyntheticExample {
  Pair pair;            // space-separated symbols
  Alignment alignment;  // (source position, target position), one link per target token
};

// task: "copy", "reverse" or "permute" (swap each adjacent pair of positions).
std::vector<SyntheticExample> synthetic_task(const std::string& task, size_t count, size_t min_len,
                                             size_t max_len, size_t symbols, uint64_t seed);

}  // namespace attnkit::data
