#pragma once

#include "attnkit/data/vocab.h"
#include "attnkit/seq2seq/model.h"
#include "attnkit/seq2seq/translator.h"
#include "attnkit/train/trainable.h"

// The GRU encoder-decoder (seq2seq/model.h) as the training loop sees it.
namespace attnkit::train {

class Seq2SeqTrainable : public Trainable {
 public:
  // Keeps references: the model, config and vocabularies must outlive it.
  Seq2SeqTrainable(seq2seq::Seq2Seq& model, const seq2seq::ModelConfig& config,
                   const data::Vocab& source_vocab, const data::Vocab& target_vocab);
  std::vector<at::Tensor> parameters() override;
  void set_training(bool training) override;
  // The real target tokens only, padding skipped, through the output layer fused with the loss;
  // REINFORCE's reward reads every position's logits, and a partly free-running decoder needs
  // each step's.
  BatchLoss loss(const Batch& batch, const LossOptions& options,
                 ReinforceBaseline& baseline) override;
  double validation_loss(const Batch& batch) override;
  std::vector<std::string> translate(const std::vector<std::string>& sources) override;
  void save_weights(const std::string& path) override;
  void save(torch::serialize::OutputArchive& archive) override;
  void load(torch::serialize::InputArchive& archive) override;

 private:
  // The loss from the output layer's input (Head::Features), with the model's output layer.
  at::Tensor output_loss(const at::Tensor& features, const at::Tensor& target, double smoothing);

  seq2seq::Seq2Seq& model_;
  const seq2seq::ModelConfig& config_;
  const data::Vocab &source_vocab_, &target_vocab_;
  bool reinforce_;  // hard attention trained with REINFORCE
};

}  // namespace attnkit::train
