#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace attnkit::data {

// Token <-> id. Ids 0..3 are always <pad>, <unk>, <sos>, <eos>.
class Vocab {
 public:
  static constexpr int64_t kPad = 0, kUnk = 1, kSos = 2, kEos = 3;

  Vocab();
  // Tokens seen at least min_freq times, most frequent first (ties by token), at most
  // max_size entries in all (0: no limit).
  static Vocab build(const std::vector<std::vector<std::string>>& sentences, size_t min_freq,
                     size_t max_size = 0);

  int64_t id(const std::string& token) const;
  const std::string& token(int64_t id) const;
  size_t size() const { return tokens_.size(); }
  std::vector<int64_t> encode(const std::vector<std::string>& tokens) const;

  // One token per line. load() checks the special tokens and names file:line on a problem.
  void save(const std::string& path) const;
  static Vocab load(const std::string& path);

  bool operator==(const Vocab& o) const { return tokens_ == o.tokens_; }

 private:
  void add(const std::string& token);
  std::vector<std::string> tokens_;
  std::unordered_map<std::string, int64_t> ids_;
};

// Pads token-id sequences into [B, max(len, 1)] with 0 (Vocab::kPad) and returns (ids, lengths).
std::pair<at::Tensor, at::Tensor> pad_batch(const std::vector<std::vector<int64_t>>& seqs);

}  // namespace attnkit::data
