#pragma once

// Private to src/eval: the check every corpus metric makes of its inputs.

#include <string>
#include <vector>

#include "attnkit/core/error.h"

namespace attnkit::eval {

// At least one reference stream, each with a line per hypothesis; else an attnkit::Error that
// names the metric and both counts.
inline void check_streams(const char* metric, const std::vector<std::string>& hyps,
                          const std::vector<std::vector<std::string>>& refs) {
  if (refs.empty()) throw Error(std::string(metric) + ": no reference stream");
  for (const auto& stream : refs)
    if (stream.size() != hyps.size())
      throw Error(std::string(metric) + ": " + std::to_string(hyps.size()) +
                  " hypotheses but a reference stream has " + std::to_string(stream.size()) +
                  " lines");
}

}  // namespace attnkit::eval
