#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "attnkit/train/batching.h"
#include "attnkit/train/checkpoint.h"
#include "attnkit/train/trainable.h"

// Validation, and the best model it selects: the loss on the validation pairs, BLEU of greedy
// translations of the first validation sentences, and model.pt, the weights with the best BLEU
// (then loss) so far.
namespace attnkit::train {

struct ValidationData {
  std::vector<Example> pairs;                    // for the loss
  std::vector<std::string> sources, references;  // raw text, for BLEU
  size_t bleu_sentences = 300;                   // how many of them BLEU translates
  std::string bleu_tokenize = "13a";             // sacreBLEU's tokenizer for the target
  // Greedy translations of raw sentences by the model being trained (translate::greedy_texts
  // over a Translator sharing its weights); unset: no BLEU.
  std::function<std::vector<std::string>(const std::vector<std::string>&)> translate;
};

struct Validation {
  double loss = 0, bleu = -1;  // bleu -1: no sentences to translate
  bool better = false;         // better than the best so far (then model.pt holds these weights)
};

class Validator {
 public:
  // `best_path`: where the best weights go (model_dir/model.pt).
  Validator(Trainable& model, const ValidationData& data, std::string best_path, size_t batch_size);
  // Whether there is anything to validate on. Without it, the latest weights count as the best.
  bool has_data() const;
  // Measures the model as it is now; model.pt takes its weights when they beat `position`'s best
  // (always without validation data), or when model.pt does not exist yet. Leaves the model in
  // training mode.
  Validation validate(const Position& position);
  // Saves the current weights as the best, whatever they score.
  void keep_current() const;
  bool has_best() const;

 private:
  double loss();
  double bleu();

  Trainable& model_;
  const ValidationData& data_;
  std::string best_path_;
  size_t batch_size_;
};

}  // namespace attnkit::train
