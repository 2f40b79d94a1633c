#include "attnkit/data/synthetic.h"

#include <random>
#include <sstream>

#include "attnkit/core/error.h"

namespace attnkit::data {

std::vector<SyntheticExample> synthetic_task(const std::string& task, size_t count, size_t min_len,
                                             size_t max_len, size_t symbols, uint64_t seed) {
  if (task != "copy" && task != "reverse" && task != "permute")
    throw Error("unknown synthetic task '" + task + "' (valid: copy, reverse, permute)");
  if (min_len < 1 || max_len < min_len || symbols < 2 || symbols > 26)
    throw Error("synthetic task: need 1 <= min_len <= max_len and 2 <= symbols <= 26");
  std::mt19937_64 rng(seed);
  std::vector<SyntheticExample> out;
  for (size_t n = 0; n < count; ++n) {
    const size_t len = min_len + rng() % (max_len - min_len + 1);
    std::vector<std::string> src(len);
    for (auto& s : src) s = std::string(1, static_cast<char>('a' + rng() % symbols));
    SyntheticExample e;
    std::string target;
    for (size_t j = 0; j < len; ++j) {
      size_t i = j;  // the source position target position j copies
      if (task == "reverse") i = len - 1 - j;
      if (task == "permute") i = (j % 2 == 0) ? (j + 1 < len ? j + 1 : j) : j - 1;
      e.alignment.insert({static_cast<int>(i), static_cast<int>(j)});
      target += (j ? " " : "") + src[i];
    }
    for (size_t i = 0; i < len; ++i) e.pair.source += (i ? " " : "") + src[i];
    e.pair.target = target;
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace attnkit::data
