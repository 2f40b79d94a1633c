#include "attnkit/data/corpus.h"

#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <random>
#include <set>
#include <unordered_set>

#include "attnkit/core/error.h"
#include "attnkit/core/files.h"
#include "attnkit/data/text.h"
#include "attnkit/io/pt_file.h"

namespace attnkit::data {

void ReadReport::problem(const std::string& where, const std::string& what) {
  ++skipped;
  if (problems.size() < kMaxProblems) problems.push_back(where + ": " + what);
}

namespace {

// A file to read line by line: a regular file (a device such as /dev/zero never ends).
std::ifstream open_lines(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) throw Error(path + ": cannot open");
  if (S_ISDIR(st.st_mode)) throw Error(path + ": is a directory, not a file");
  if (!S_ISREG(st.st_mode) && !S_ISFIFO(st.st_mode)) throw Error(path + ": not a regular file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot open");
  return in;
}

}  // namespace

std::vector<Pair> read_tsv(const std::string& path, const TsvOptions& options, ReadReport* report) {
  std::ifstream in = open_lines(path);
  ReadReport local;
  ReadReport& r = report ? *report : local;
  std::vector<Pair> pairs;
  std::string raw;
  size_t line_no = 0;
  for (LineStatus status; (status = read_line(in, raw, kMaxLineBytes)) != LineStatus::End;) {
    ++line_no;
    ++r.lines;
    const std::string where = path + ":" + std::to_string(line_no);
    auto bad = [&](const std::string& what) {
      if (options.strict) throw Error(where + ": " + what + " (--strict)");
      r.problem(where, what);
    };
    // Not skipped: the rest of such a line may never end (a sparse file, a FIFO).
    if (status == LineStatus::TooLong)
      throw Error(where + ": a line of more than " + std::to_string(kMaxLineBytes) +
                  " bytes (the limit)");
    std::string_view line = text::strip_eol(raw);
    if (line_no == 1) line = text::strip_bom(line);
    if (line.find_first_not_of(" \t") == std::string_view::npos) {
      ++r.blank;
      continue;
    }
    if (!text::valid_utf8(line)) {
      bad("invalid UTF-8");
      continue;
    }
    const auto tab = line.find('\t');
    if (tab == std::string_view::npos) {
      bad("no tab between source and target");
      continue;
    }
    const auto tab2 = line.find('\t', tab + 1);
    auto first = text::squeeze_spaces(line.substr(0, tab));
    auto second = text::squeeze_spaces(line.substr(
        tab + 1, tab2 == std::string_view::npos ? std::string_view::npos : tab2 - tab - 1));
    if (first.empty() || second.empty()) {
      bad(first.empty() ? "empty source" : "empty target");
      continue;
    }
    if (options.reverse) std::swap(first, second);
    std::string extra;
    if (tab2 != std::string_view::npos) {
      auto rest = line.substr(tab2 + 1);
      extra = std::string(rest.substr(0, rest.find('\t')));
    }
    pairs.push_back({std::move(first), std::move(second), std::move(extra)});
  }
  if (in.bad()) throw Error(path + ": read error");
  r.pairs += pairs.size();
  return pairs;
}

std::vector<std::string> read_lines(const std::string& path, size_t max_line_bytes) {
  std::ifstream file;
  if (!path.empty()) file = open_lines(path);
  std::istream& in = path.empty() ? std::cin : file;
  std::vector<std::string> lines;
  std::string line;
  size_t n = 1;
  for (LineStatus status; (status = read_line(in, line, max_line_bytes + 1)) != LineStatus::End;
       ++n) {
    std::string_view l = text::strip_eol(line);
    if (n == 1) l = text::strip_bom(l);
    if (status == LineStatus::TooLong || l.size() > max_line_bytes)
      throw Error((path.empty() ? std::string("<stdin>") : path) + ":" + std::to_string(n) +
                  ": a line of more than " + std::to_string(max_line_bytes) + " bytes (the limit)");
    if (!text::valid_utf8(l))
      throw Error((path.empty() ? std::string("<stdin>") : path) + ":" + std::to_string(n) +
                  ": invalid UTF-8");
    lines.emplace_back(l);
  }
  return lines;
}

void write_tsv(const std::string& path, const std::vector<Pair>& pairs) {
  std::string out;
  for (const auto& p : pairs)
    out += p.source + "\t" + p.target + (p.extra.empty() ? "" : "\t" + p.extra) + "\n";
  write_file_atomic(path, out);
}

size_t dedup(std::vector<Pair>& pairs) {
  std::unordered_set<std::string> seen;
  const size_t before = pairs.size();
  std::vector<Pair> kept;
  kept.reserve(pairs.size());
  for (auto& p : pairs)
    if (seen.insert(p.source + '\t' + p.target).second) kept.push_back(std::move(p));
  pairs = std::move(kept);
  return before - pairs.size();
}

size_t filter_length(std::vector<Pair>& pairs, size_t max_tokens,
                     const std::function<size_t(const std::string&)>& count_source,
                     const std::function<size_t(const std::string&)>& count_target) {
  const size_t before = pairs.size();
  std::vector<Pair> kept;
  for (auto& p : pairs) {
    const size_t s = count_source(p.source), t = count_target(p.target);
    if (s >= 1 && t >= 1 && s <= max_tokens && t <= max_tokens) kept.push_back(std::move(p));
  }
  pairs = std::move(kept);
  return before - pairs.size();
}

void deterministic_shuffle(std::vector<size_t>& items, uint64_t seed) {
  // Fisher-Yates with mt19937_64 and a plain modulo: the same sequence everywhere.
  std::mt19937_64 rng(seed);
  for (size_t i = items.size(); i > 1; --i) std::swap(items[i - 1], items[rng() % i]);
}

Split split(std::vector<Pair> pairs, double valid_fraction, double test_fraction, uint64_t seed) {
  if (valid_fraction < 0 || test_fraction < 0 || valid_fraction + test_fraction >= 1)
    throw Error("split: the valid and test fractions must be >= 0 and sum to less than 1");
  std::vector<size_t> order(pairs.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  deterministic_shuffle(order, seed);
  const auto n = pairs.size();
  const auto n_valid = static_cast<size_t>(n * valid_fraction);
  const auto n_test = static_cast<size_t>(n * test_fraction);
  Split s;
  for (size_t i = 0; i < n; ++i) {
    auto& dest = i < n_test ? s.test : i < n_test + n_valid ? s.valid : s.train;
    dest.push_back(std::move(pairs[order[i]]));
  }
  return s;
}

CorpusStats stats(const std::vector<Pair>& pairs,
                  const std::function<size_t(const std::string&)>& count_source,
                  const std::function<size_t(const std::string&)>& count_target) {
  CorpusStats s;
  s.pairs = pairs.size();
  auto add = [](SideStats& side, size_t len) {
    side.tokens += len;
    side.max_len = std::max(side.max_len, len);
    ++side.length_histogram[len / 5 * 5];
  };
  for (const auto& p : pairs) {
    add(s.source, count_source(p.source));
    add(s.target, count_target(p.target));
  }
  return s;
}

}  // namespace attnkit::data
