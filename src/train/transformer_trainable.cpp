#include "attnkit/train/transformer_trainable.h"

#include <ATen/ATen.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include "attnkit/train/step.h"

namespace attnkit::train {

TransformerTrainable::TransformerTrainable(transformer::TransformerModel& model,
                                           const seq2seq::ModelConfig& config,
                                           const data::Vocab& source_vocab,
                                           const data::Vocab& target_vocab)
    : model_(model), config_(config), source_vocab_(source_vocab), target_vocab_(target_vocab) {}

std::vector<at::Tensor> TransformerTrainable::parameters() { return model_->parameters(); }

void TransformerTrainable::set_training(bool training) { model_->train(training); }

at::Tensor TransformerTrainable::token_loss(const Batch& b, double smoothing) {
  // The decoder runs on the real target positions only (kernels/ragged.h): the padding, about
  // 30 % of the positions in batches sorted by source length, is neither computed nor scored.
  const auto ragged = kernels::Ragged::from_mask(b.target_out != data::Vocab::kPad);
  const auto features = model_->decode(b.target_in, model_->encode(b.source, b.lengths),
                                       /*maps=*/nullptr, &ragged);  // [N, D]
  return projected_loss(features, model_->output_weight(), model_->output_bias(),
                        kernels::unpad(b.target_out, ragged), smoothing);
}

BatchLoss TransformerTrainable::loss(const Batch& b, const LossOptions& o, ReinforceBaseline&) {
  BatchLoss l;
  l.loss = token_loss(b, o.label_smoothing);
  l.objective = l.loss;
  return l;
}

double TransformerTrainable::validation_loss(const Batch& b) {
  at::NoGradGuard no_grad;
  return token_loss(b, 0.0).item<double>();
}

std::vector<std::string> TransformerTrainable::translate(const std::vector<std::string>& sources) {
  seq2seq::Translator translator(config_, model_, source_vocab_, target_vocab_);
  return seq2seq::greedy_texts(translator, sources);
}

void TransformerTrainable::save_weights(const std::string& path) {
  seq2seq::save_weights(*model_, path);
}

void TransformerTrainable::save(torch::serialize::OutputArchive& archive) { model_->save(archive); }

void TransformerTrainable::load(torch::serialize::InputArchive& archive) { model_->load(archive); }

}  // namespace attnkit::train
