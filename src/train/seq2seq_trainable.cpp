#include "attnkit/train/seq2seq_trainable.h"

#include <ATen/ATen.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

namespace attnkit::train {

Seq2SeqTrainable::Seq2SeqTrainable(seq2seq::Seq2Seq& model, const seq2seq::ModelConfig& config,
                                   const data::Vocab& source_vocab, const data::Vocab& target_vocab)
    : model_(model),
      config_(config),
      source_vocab_(source_vocab),
      target_vocab_(target_vocab),
      reinforce_(config.model.weighting() == WeightingKind::Hard &&
                 config.model.hard_gradient() == HardGradient::Reinforce) {}

std::vector<at::Tensor> Seq2SeqTrainable::parameters() { return model_->parameters(); }

void Seq2SeqTrainable::set_training(bool training) { model_->train(training); }

at::Tensor Seq2SeqTrainable::output_loss(const at::Tensor& features, const at::Tensor& target,
                                         double smoothing) {
  const auto& layer = model_->decoder->output;
  return projected_loss(features, layer->weight, layer->bias, target, smoothing,
                        /*fused=*/model_->options.fused_kernels());
}

BatchLoss Seq2SeqTrainable::loss(const Batch& b, const LossOptions& o,
                                 ReinforceBaseline& baseline) {
  const auto real = reinforce_ ? at::Tensor() : b.target_out != data::Vocab::kPad;
  const bool fused_head = !reinforce_ && o.teacher_forcing >= 1.0;
  auto out = model_->forward(b.source, b.lengths, b.target_in, o.teacher_forcing, real,
                             fused_head ? seq2seq::Head::Features : seq2seq::Head::Logits);
  const auto target = real.defined() ? b.target_out.masked_select(real) : b.target_out;
  BatchLoss l;
  l.loss = fused_head ? output_loss(out.features, target, o.label_smoothing)
                      : sequence_loss(out.logits, target, o.label_smoothing);
  l.objective = l.loss;
  if (reinforce_ && out.log_prob.defined())
    l.objective = reinforce_objective(l.loss, out.logits, b.target_out, out.log_prob, out.entropy,
                                      o.entropy_bonus, baseline);
  return l;
}

double Seq2SeqTrainable::validation_loss(const Batch& b) {
  at::NoGradGuard no_grad;
  const auto real = b.target_out != data::Vocab::kPad;  // the real tokens only
  auto out = model_->forward(b.source, b.lengths, b.target_in, 1.0, real, seq2seq::Head::Features);
  return output_loss(out.features, b.target_out.masked_select(real), 0.0).item<double>();
}

std::vector<std::string> Seq2SeqTrainable::translate(const std::vector<std::string>& sources) {
  seq2seq::Translator translator(config_, model_, source_vocab_, target_vocab_);
  return seq2seq::greedy_texts(translator, sources);
}

void Seq2SeqTrainable::save_weights(const std::string& path) {
  seq2seq::save_weights(model_, path);
}

void Seq2SeqTrainable::save(torch::serialize::OutputArchive& archive) { model_->save(archive); }

void Seq2SeqTrainable::load(torch::serialize::InputArchive& archive) { model_->load(archive); }

}  // namespace attnkit::train
