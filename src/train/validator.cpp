#include "attnkit/train/validator.h"

#include <algorithm>
#include <filesystem>

#include "attnkit/eval/metrics.h"
#include "attnkit/io/weights.h"

namespace attnkit::train {

Validator::Validator(Trainable& model, const ValidationData& data, std::string best_path,
                     size_t batch_size)
    : model_(model), data_(data), best_path_(std::move(best_path)), batch_size_(batch_size) {}

bool Validator::has_data() const { return !data_.pairs.empty() || !data_.sources.empty(); }

bool Validator::has_best() const { return std::filesystem::exists(best_path_); }

void Validator::keep_current() const { io::save_weights(model_.module(), best_path_); }

double Validator::loss() {
  const auto& valid = data_.pairs;
  if (valid.empty()) return 0;
  double total = 0;
  int64_t tokens = 0;
  for (size_t start = 0; start < valid.size(); start += batch_size_) {
    std::vector<size_t> members;
    for (size_t i = start; i < std::min(valid.size(), start + batch_size_); ++i)
      members.push_back(i);
    auto b = collate(valid, members);
    total += model_.validation_loss(b) * b.target_tokens;
    tokens += b.target_tokens;
  }
  return total / std::max<int64_t>(tokens, 1);
}

double Validator::bleu() {
  if (data_.sources.empty() || !data_.translate) return -1;
  const size_t n = std::min(data_.bleu_sentences, data_.sources.size());
  const std::vector<std::string> sources(data_.sources.begin(), data_.sources.begin() + n);
  const std::vector<std::string> refs(data_.references.begin(), data_.references.begin() + n);
  eval::BleuOptions options;
  options.tokenize = data_.bleu_tokenize;
  return eval::corpus_bleu(data_.translate(sources), {refs}, options).score;
}

Validation Validator::validate(const Position& p) {
  model_.set_training(false);
  Validation v;
  v.loss = loss();
  v.bleu = bleu();
  model_.set_training(true);
  // Without validation data there is nothing to compare: the latest weights count as better, so
  // they are kept and the learning rate never decays.
  v.better =
      !has_data() || v.bleu > p.best_bleu + 1e-9 || (v.bleu == p.best_bleu && v.loss < p.best_loss);
  if (v.better || !has_best()) keep_current();
  return v;
}

}  // namespace attnkit::train
