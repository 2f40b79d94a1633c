#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "attnkit/data/corpus.h"
#include "attnkit/eval/metrics.h"

// Synthetic translation tasks with known alignments: a tiny attention model should learn them
// in seconds, with its attention following the gold alignment.
namespace attnkit::data {

struct SyntheticExample {
  Pair pair;                  // space-separated symbols
  eval::Alignment alignment;  // (source position, target position), one link per target token
};

// task: "copy", "reverse" or "permute" (swap each adjacent pair of positions).
std::vector<SyntheticExample> synthetic_task(const std::string& task, size_t count, size_t min_len,
                                             size_t max_len, size_t symbols, uint64_t seed);

// "0-0 1-2 ..." (source-target), the Pharaoh format the gold alignment column uses.
std::string format_alignment(const eval::Alignment& a);
eval::Alignment parse_alignment(const std::string& text);

}  // namespace attnkit::data
