#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

// Parallel corpora: reading, cleaning, splitting and describing sentence pairs.
namespace attnkit::data {

struct Pair {
  std::string source;
  std::string target;
  std::string extra{};  // the third column, if any (an attribution, or a gold alignment)
  bool operator==(const Pair& o) const { return source == o.source && target == o.target; }
};

// What a reader met: every malformed line is reported as "file:line: problem".
struct ReadReport {
  size_t lines = 0;                   // lines read, blank ones included
  size_t pairs = 0;                   // pairs kept
  size_t blank = 0;                   // empty lines, skipped silently
  size_t skipped = 0;                 // malformed lines, skipped
  std::vector<std::string> problems;  // the first few, for the user
  static constexpr size_t kMaxProblems = 20;
  void problem(const std::string& where, const std::string& what);
};

struct TsvOptions {
  bool reverse = false;  // read target<TAB>source
  bool strict = false;   // a malformed line throws attnkit::Error instead of being skipped
};

// Reads `source<TAB>target[<TAB>anything...]` lines (Tatoeba/Anki files work as they are).
// UTF-8 with or without a BOM, LF or CRLF. Lines without a tab, with an empty side or with
// invalid UTF-8 are skipped and reported, or abort the read when strict.
std::vector<Pair> read_tsv(const std::string& path, const TsvOptions& options = {},
                           ReadReport* report = nullptr);
// One sentence a line from `path` (empty: standard input), BOM and CR/LF removed. Invalid UTF-8
// is an attnkit::Error naming the file (or <stdin>) and the line.
// A line longer than max_line_bytes is an error naming file:line (a 10 MB line would otherwise
// be tokenised and translated, gigabytes later); so is a directory given as the file.
constexpr size_t kMaxLineBytes = 64 << 10;
std::vector<std::string> read_lines(const std::string& path, size_t max_line_bytes = kMaxLineBytes);

// Writes pairs as TSV through a temporary file and a rename.
void write_tsv(const std::string& path, const std::vector<Pair>& pairs);

// Removes exact duplicate pairs, keeping the first occurrence; returns how many went.
size_t dedup(std::vector<Pair>& pairs);

// Keeps pairs whose both sides have between 1 and max_tokens tokens under `count`.
size_t filter_length(std::vector<Pair>& pairs, size_t max_tokens,
                     const std::function<size_t(const std::string&)>& count_source,
                     const std::function<size_t(const std::string&)>& count_target);

struct Split {
  std::vector<Pair> train, valid, test;
};
// A deterministic split: the same pairs and seed give the same split on every machine.
Split split(std::vector<Pair> pairs, double valid_fraction, double test_fraction, uint64_t seed);

struct SideStats {
  size_t tokens = 0;
  size_t max_len = 0;
  std::map<size_t, size_t> length_histogram;  // bucket start (multiples of 5) -> count
};
struct CorpusStats {
  size_t pairs = 0;
  SideStats source, target;
};
CorpusStats stats(const std::vector<Pair>& pairs,
                  const std::function<size_t(const std::string&)>& count_source,
                  const std::function<size_t(const std::string&)>& count_target);

// A portable deterministic permutation (std::shuffle's algorithm is implementation-defined).
void deterministic_shuffle(std::vector<size_t>& items, uint64_t seed);

}  // namespace attnkit::data
