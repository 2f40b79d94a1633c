#include "attnkit/data/vocab.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>

#include "attnkit/core/error.h"
#include "attnkit/core/files.h"
#include "attnkit/data/text.h"
#include "attnkit/io/pt_file.h"

namespace attnkit::data {
namespace {
const char* const kSpecials[] = {"<pad>", "<unk>", "<sos>", "<eos>"};
}

Vocab::Vocab() {
  for (const char* s : kSpecials) add(s);
}

void Vocab::add(const std::string& token) {
  if (ids_.emplace(token, static_cast<int64_t>(tokens_.size())).second) tokens_.push_back(token);
}

Vocab Vocab::build(const std::vector<std::vector<std::string>>& sentences, size_t min_freq,
                   size_t max_size) {
  std::map<std::string, size_t> counts;
  for (const auto& s : sentences)
    for (const auto& t : s) ++counts[t];
  std::vector<std::pair<std::string, size_t>> sorted(counts.begin(), counts.end());
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  Vocab v;
  for (const auto& [token, count] : sorted) {
    if (count < min_freq || (max_size && v.size() >= max_size)) break;
    v.add(token);
  }
  return v;
}

int64_t Vocab::id(const std::string& token) const {
  auto it = ids_.find(token);
  return it == ids_.end() ? kUnk : it->second;
}

const std::string& Vocab::token(int64_t id) const {
  if (id < 0 || id >= static_cast<int64_t>(tokens_.size())) return tokens_[kUnk];
  return tokens_[id];
}

std::vector<int64_t> Vocab::encode(const std::vector<std::string>& tokens) const {
  std::vector<int64_t> ids;
  ids.reserve(tokens.size());
  for (const auto& t : tokens) ids.push_back(id(t));
  return ids;
}

void Vocab::save(const std::string& path) const {
  std::string out;
  for (const auto& t : tokens_) out += t + "\n";
  write_file_atomic(path, out);
}

Vocab Vocab::load(const std::string& path) {
  // A vocabulary of a million tokens is 20 MB; 256 MiB leaves room for any real one.
  std::istringstream in(read_small_file(path, size_t(256) << 20, "a vocabulary"));
  Vocab v;
  v.tokens_.clear();
  v.ids_.clear();
  std::string line;
  size_t n = 0;
  while (std::getline(in, line)) {
    ++n;
    std::string token(text::strip_eol(line));
    if (n <= 4 && token != kSpecials[n - 1])
      throw Error(path + ":" + std::to_string(n) + ": expected the special token " +
                  kSpecials[n - 1] + ", found '" + token + "'");
    if (token.empty()) throw Error(path + ":" + std::to_string(n) + ": empty token");
    if (v.ids_.count(token))
      throw Error(path + ":" + std::to_string(n) + ": duplicate token '" + token + "'");
    v.add(token);
  }
  if (n < 4) throw Error(path + ": truncated vocabulary (" + std::to_string(n) + " lines)");
  return v;
}

std::pair<at::Tensor, at::Tensor> pad_batch(const std::vector<std::vector<int64_t>>& seqs) {
  size_t width = 1;
  for (const auto& s : seqs) width = std::max(width, s.size());
  auto ids = at::zeros({static_cast<int64_t>(seqs.size()), static_cast<int64_t>(width)}, at::kLong);
  auto lengths = at::zeros({static_cast<int64_t>(seqs.size())}, at::kLong);
  auto ids_a = ids.accessor<int64_t, 2>();
  auto len_a = lengths.accessor<int64_t, 1>();
  for (size_t i = 0; i < seqs.size(); ++i) {
    for (size_t j = 0; j < seqs[i].size(); ++j) ids_a[i][j] = seqs[i][j];
    len_a[i] = static_cast<int64_t>(seqs[i].size());
  }
  return {ids, lengths};
}

}  // namespace attnkit::data
