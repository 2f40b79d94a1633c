#pragma once

#include "attnkit/data/vocab.h"
#include "attnkit/seq2seq/translator.h"
#include "attnkit/train/trainable.h"
#include "attnkit/transformer/model.h"

// The Transformer (transformer/model.h) as the training loop sees it.
namespace attnkit::train {

class TransformerTrainable : public Trainable {
 public:
  // Keeps references: the model, config and vocabularies must outlive it.
  TransformerTrainable(transformer::TransformerModel& model, const seq2seq::ModelConfig& config,
                       const data::Vocab& source_vocab, const data::Vocab& target_vocab);
  std::vector<at::Tensor> parameters() override;
  void set_training(bool training) override;
  // Teacher forcing over the whole target at once (the causal mask hides the future); the output
  // layer runs on the real target tokens only, fused with the label-smoothed loss.
  BatchLoss loss(const Batch& batch, const LossOptions& options,
                 ReinforceBaseline& baseline) override;
  // Its randomness is kernels::dropout's (the attention weights' dropout included).
  bool runs_in_lanes() const override { return true; }
  double validation_loss(const Batch& batch) override;
  std::vector<std::string> translate(const std::vector<std::string>& sources) override;
  void save_weights(const std::string& path) override;
  void save(torch::serialize::OutputArchive& archive) override;
  void load(torch::serialize::InputArchive& archive) override;

 private:
  at::Tensor token_loss(const Batch& batch, double smoothing);

  transformer::TransformerModel& model_;
  const seq2seq::ModelConfig& config_;
  const data::Vocab &source_vocab_, &target_vocab_;
};

}  // namespace attnkit::train
