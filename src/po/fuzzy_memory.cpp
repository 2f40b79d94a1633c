#include "attnkit/po/fuzzy_memory.h"

#include <algorithm>
#include <cctype>
#include <limits>

#include "attnkit/data/text.h"

namespace attnkit::po {
namespace {

// Pairs checked by their distance per message: the ones sharing the most words with it. A
// message of the archive's corpus that clears a 75 % threshold is among the first few dozen.
constexpr size_t kCandidates = 256;
// A word in more pairs than this ("the", "to", "file") picks no candidates: it would make every
// pair one, and the others' words pick the pairs that matter.
constexpr size_t kCommonWord = 50000;

std::vector<std::string> words_of(const std::u32string& s) {
  std::vector<std::string> out;
  std::string w;
  for (char32_t c : s) {
    if (c < 128 && std::isalnum(static_cast<int>(c))) {
      w.push_back(static_cast<char>(std::tolower(static_cast<int>(c))));
    } else if (!w.empty()) {
      out.push_back(std::move(w));
      w.clear();
    }
  }
  if (!w.empty()) out.push_back(std::move(w));
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

// Levenshtein distance, or `limit + 1` as soon as it must exceed `limit`: only the band of
// the matrix within `limit` of its diagonal is filled.
size_t bounded_distance(const std::u32string& a, const std::u32string& b, size_t limit) {
  const size_t n = a.size(), m = b.size();
  if ((n > m ? n - m : m - n) > limit) return limit + 1;
  const size_t inf = std::numeric_limits<size_t>::max() / 2;
  std::vector<size_t> prev(m + 1, inf), cur(m + 1, inf);
  for (size_t j = 0; j <= std::min(m, limit); ++j) prev[j] = j;
  for (size_t i = 1; i <= n; ++i) {
    const size_t lo = i > limit ? i - limit : 0, hi = std::min(m, i + limit);
    std::fill(cur.begin(), cur.end(), inf);
    if (lo == 0) cur[0] = i;
    size_t row_min = lo == 0 ? i : inf;
    for (size_t j = std::max<size_t>(lo, 1); j <= hi; ++j) {
      const size_t sub = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({sub, prev[j] + 1, cur[j - 1] + 1});
      row_min = std::min(row_min, cur[j]);
    }
    if (row_min > limit) return limit + 1;
    std::swap(prev, cur);
  }
  return std::min(prev[m], limit + 1);
}

}  // namespace

int similarity(const std::u32string& a, const std::u32string& b) {
  const size_t longer = std::max(a.size(), b.size());
  if (longer == 0) return 100;
  const size_t d = bounded_distance(a, b, longer);
  return static_cast<int>(100 * (longer - d) / longer);
}

void FuzzyMemory::add(const std::string& source, const std::string& target,
                      const std::string& origin) {
  if (origins_.empty() || origins_.back() != origin) origins_.push_back(origin);
  const auto id = static_cast<uint32_t>(targets_.size());
  sources_.push_back(text::decode(source));
  targets_.push_back(target);
  origin_of_.push_back(static_cast<uint32_t>(origins_.size() - 1));
  for (auto& w : words_of(sources_.back())) postings_[w].push_back(id);
}

std::optional<FuzzyMemory::Hit> FuzzyMemory::best(const std::string& message, int threshold) const {
  const std::u32string q = text::decode(message);
  if (q.empty()) return std::nullopt;
  // Candidates: the pairs sharing the most of the message's words, that are not too long or
  // too short to reach the threshold (the distance is at least the difference of the lengths).
  std::unordered_map<uint32_t, uint32_t> shared;
  for (const auto& w : words_of(q)) {
    auto it = postings_.find(w);
    if (it == postings_.end() || it->second.size() > kCommonWord) continue;
    for (uint32_t id : it->second) ++shared[id];
  }
  auto reachable = [&](size_t len) {
    const size_t longer = std::max(len, q.size()), shorter = std::min(len, q.size());
    return 100 * shorter >= static_cast<size_t>(threshold) * longer;
  };
  std::vector<std::pair<uint32_t, uint32_t>> ranked;  // (-shared words, pair) for sorting
  for (const auto& [id, n] : shared)
    if (reachable(sources_[id].size())) ranked.emplace_back(~n, id);
  const size_t keep = std::min(kCandidates, ranked.size());
  std::partial_sort(ranked.begin(), ranked.begin() + keep, ranked.end());
  ranked.resize(keep);
  std::sort(ranked.begin(), ranked.end(),
            [](const auto& x, const auto& y) { return x.second < y.second; });

  std::optional<Hit> hit;
  uint32_t best_id = 0;
  for (const auto& [unused, id] : ranked) {
    const auto& s = sources_[id];
    const size_t longer = std::max(s.size(), q.size());
    // The largest distance that still scores at least the threshold (or beats the best so far).
    const int floor_score = hit ? hit->score + 1 : threshold;
    if (floor_score > 100) break;
    const size_t limit = longer * static_cast<size_t>(100 - floor_score) / 100;
    const size_t d = bounded_distance(q, s, limit);
    if (d > limit) continue;
    const int score = static_cast<int>(100 * (longer - d) / longer);
    if (score < floor_score) continue;
    hit = Hit{score, {}, {}, {}};
    best_id = id;
  }
  if (!hit) return std::nullopt;
  hit->source = text::encode(sources_[best_id]);
  hit->target = targets_[best_id];
  hit->origin = origins_[origin_of_[best_id]];
  return hit;
}

}  // namespace attnkit::po
