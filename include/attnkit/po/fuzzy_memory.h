#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

// Fuzzy matches from a translation memory, scored as translators' tools score them.
//
// translate-toolkit's `pot2po --tm` and Poedit's pre-translation offer the translation of a
// similar message when no message matches exactly, with a similarity in 0..100: one minus the
// Levenshtein distance over the longer message's length, in characters. That is the figure a
// translator reads ("87 %"), so it is this one too (`similarity`). Finding the best of a million
// pairs without measuring every one: candidates are the pairs that share the message's rarest
// words (an inverted index), the length bound (a distance is at least the difference of the
// lengths) drops those that cannot reach the threshold, and the distance is measured on the
// rest. tests/test_po_fuzzy_memory.cpp holds `best` to a scan of every pair.
namespace attnkit::po {

// 100 * (1 - distance / max(|a|, |b|)) over code points, rounded down; 100 for two empty strings.
int similarity(const std::u32string& a, const std::u32string& b);

class FuzzyMemory {
 public:
  // `source` as the model's pairs store it (whitespace squeezed, no accelerator).
  void add(const std::string& source, const std::string& target, const std::string& origin);
  size_t size() const { return targets_.size(); }

  struct Hit {
    int score = 0;       // similarity, 0..100
    std::string source;  // the memory's message
    std::string target;  // its translation
    std::string origin;  // the file it came from
  };
  // The most similar message of at least `threshold`, or nullopt. Ties go to the earlier pair.
  std::optional<Hit> best(const std::string& message, int threshold) const;

 private:
  std::vector<std::u32string> sources_;
  std::vector<std::string> targets_;
  std::vector<uint32_t> origin_of_;
  std::vector<std::string> origins_;
  std::unordered_map<std::string, std::vector<uint32_t>> postings_;  // lower-cased word -> pairs
};

}  // namespace attnkit::po
