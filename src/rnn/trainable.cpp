#include "attnkit/rnn/trainable.h"

#include <ATen/ATen.h>

#include "attnkit/data/vocab.h"
#include "attnkit/train/step.h"

namespace attnkit::rnn {
using train::Batch;
using train::BatchLoss;
using train::LossOptions;
using train::ReinforceBaseline;

RnnTrainable::RnnTrainable(RnnModel& model)
    : model_(model),
      reinforce_(model->options.weighting() == WeightingKind::Hard &&
                 model->options.hard_gradient() == HardGradient::Reinforce) {}

std::vector<at::Tensor> RnnTrainable::parameters() { return model_->parameters(); }

void RnnTrainable::set_training(bool training) { model_->train(training); }

at::Tensor RnnTrainable::output_loss(const at::Tensor& features, const at::Tensor& target,
                                     double smoothing) {
  const auto& layer = model_->decoder->output;
  return train::projected_loss(features, layer->weight, layer->bias, target, smoothing,
                               /*fused=*/model_->options.fused_kernels());
}

BatchLoss RnnTrainable::loss(const Batch& b, const LossOptions& o, ReinforceBaseline& baseline) {
  const auto real = reinforce_ ? at::Tensor() : b.target_out != data::Vocab::kPad;
  const bool fused_head = !reinforce_ && o.teacher_forcing >= 1.0;
  auto out = model_->forward(b.source, b.lengths, b.target_in, o.teacher_forcing, real,
                             fused_head ? Head::Features : Head::Logits);
  const auto target = real.defined() ? b.target_out.masked_select(real) : b.target_out;
  BatchLoss l;
  l.loss = fused_head ? output_loss(out.features, target, o.label_smoothing)
                      : train::sequence_loss(out.logits, target, o.label_smoothing);
  l.objective = l.loss;
  if (reinforce_ && out.log_prob.defined())
    l.objective = train::reinforce_objective(l.loss, out.logits, b.target_out, out.log_prob,
                                             out.entropy, o.entropy_bonus, baseline);
  return l;
}

double RnnTrainable::validation_loss(const Batch& b) {
  at::NoGradGuard no_grad;
  const auto real = b.target_out != data::Vocab::kPad;  // the real tokens only
  auto out = model_->forward(b.source, b.lengths, b.target_in, 1.0, real, Head::Features);
  return output_loss(out.features, b.target_out.masked_select(real), 0.0).item<double>();
}

}  // namespace attnkit::rnn
