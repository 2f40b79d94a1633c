#pragma once

// Shared helpers for the test suite: golden fixtures written by scripts/make_golden.py from
// PyTorch, closeness checks that report the worst element, and finite-difference gradients.

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/nn/module.h>

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "attnkit/attention/types.h"
#include "attnkit/data/synthetic.h"
#include "attnkit/data/vocab.h"
#include "attnkit/io/pt_file.h"
#include "attnkit/rnn/model.h"
#include "attnkit/train/trainer.h"
#include "attnkit/transformer/model.h"
#include "attnkit/translate/translator.h"

namespace attnkit::testing {

// A translator over a model in memory (sharing its weights), and a model trained as the CLI
// trains it (translate::train_model: validation BLEU through such a translator).
translate::Translator translator_for(const translate::ModelConfig& config, rnn::RnnModel model,
                                     const data::Vocab& source_vocab,
                                     const data::Vocab& target_vocab);
translate::Translator translator_for(const translate::ModelConfig& config,
                                     transformer::TransformerModel model,
                                     const data::Vocab& source_vocab,
                                     const data::Vocab& target_vocab);
train::TrainResult train(const translate::ModelConfig& config, rnn::RnnModel model,
                         const data::Vocab& source_vocab, const data::Vocab& target_vocab,
                         const train::TrainData& data, const train::TrainOptions& options);
train::TrainResult train(const translate::ModelConfig& config, transformer::TransformerModel model,
                         const data::Vocab& source_vocab, const data::Vocab& target_vocab,
                         const train::TrainData& data, const train::TrainOptions& options);

std::string golden_path(const std::string& file);
// A golden fixture file, loaded once.
const io::TensorDict& golden(const std::string& file);
// The tensors whose names start with `prefix`, with the prefix stripped.
io::TensorDict with_prefix(const io::TensorDict& dict, const std::string& prefix);

// |actual - expected| <= atol + rtol |expected| everywhere, and equal shapes.
::testing::AssertionResult close(const at::Tensor& actual, const at::Tensor& expected,
                                 double atol = 1e-5, double rtol = 1e-5);

// Central differences (in double) against autograd, for every element of every input.
// `loss` must rebuild the scalar loss from the current values of `inputs`.
::testing::AssertionResult gradcheck(const std::function<at::Tensor()>& loss,
                                     const std::vector<at::Tensor>& inputs, double eps = 1e-6,
                                     double tol = 1e-6);

// Parameters of a module as a vector (for gradcheck).
std::vector<at::Tensor> parameters_of(const torch::nn::Module& module);

// A scalar that depends on every element of the outputs, with fixed random projections.
at::Tensor projection_loss(const at::Tensor& output, const at::Tensor& weights, int64_t seed);

// A directory of its own under the system temp directory, emptied on creation and removed with
// everything in it when the test ends, so repeated runs leave nothing behind.
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& name);
  ~ScratchDir();
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& file) const { return path_ / file; }
  std::string str() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

// A score x weighting pair for parameterised tests, with a readable name.
struct ScoreWeighting {
  ScoreKind score;
  WeightingKind weighting;
};
void PrintTo(const ScoreWeighting& c, std::ostream* os);
std::string test_name(const ScoreWeighting& c);
// Every score with each of the given weightings.
std::vector<ScoreWeighting> all_scores_with(const std::vector<WeightingKind>& weightings);

// A synthetic task (data/synthetic.h: lengths 3-8, 8 symbols, seed 1) as training data, with one
// vocabulary for both sides ("en" tokens), and 100 test examples of seed 99.
struct SyntheticData {
  data::Vocab vocab;
  train::TrainData data;
  std::vector<data::SyntheticExample> test;
};
SyntheticData synthetic_data(const std::string& task, size_t train_count);

// The small Transformer the tests train on the synthetic tasks (d_model 32, 4 heads, 2 + 2
// layers, no dropout), "en" tokenizers on both sides.
translate::ModelConfig tiny_transformer_config(int64_t vocab);
// Options that train it quickly in `dir`: batches of 32, lr 3e-3 after 100 warm-up steps, no
// label smoothing, no early stop, no checkpoints between epochs.
train::TrainOptions tiny_transformer_training(const std::string& dir, int64_t epochs);

}  // namespace attnkit::testing
