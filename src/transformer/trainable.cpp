#include "attnkit/transformer/trainable.h"

#include <ATen/ATen.h>

#include "attnkit/data/vocab.h"
#include "attnkit/kernels/ops/ragged.h"
#include "attnkit/train/step.h"

namespace attnkit::transformer {
using train::Batch;
using train::BatchLoss;
using train::LossOptions;
using train::ReinforceBaseline;

TransformerTrainable::TransformerTrainable(TransformerModel& model) : model_(model) {}

std::vector<at::Tensor> TransformerTrainable::parameters() { return model_->parameters(); }

void TransformerTrainable::set_training(bool training) { model_->train(training); }

at::Tensor TransformerTrainable::token_loss(const Batch& b, double smoothing) {
  // The decoder runs on the real target positions only (kernels/ragged.h): the padding, about
  // 30 % of the positions in batches sorted by source length, is neither computed nor scored.
  const auto ragged = kernels::Ragged::from_mask(b.target_out != data::Vocab::kPad);
  const auto features = model_->decode(b.target_in, model_->encode(b.source, b.lengths),
                                       /*maps=*/nullptr, &ragged);  // [N, D]
  return train::projected_loss(features, model_->output_weight(), model_->output_bias(),
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

}  // namespace attnkit::transformer
