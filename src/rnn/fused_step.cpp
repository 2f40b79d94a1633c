#include "attnkit/rnn/fused_step.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <memory>
#include <mutex>

#include "../core/derived_weights.h"

namespace attnkit::rnn {
namespace {

// The kernel's view of a decoder's weights (see kernels::DecoderStepWeights for the shapes).
kernels::DecoderStepWeights step_weights(const Decoder& d) {
  const auto& o = d->options;
  const auto gru = d->gru->all_weights();  // w_ih, w_hh, b_ih, b_hh per layer
  const int64_t E = o.embed_size();
  kernels::DecoderStepWeights w;
  w.table = at::addmm(gru[2].detach(), d->embedding->weight.detach(),
                      gru[0].detach().narrow(1, 0, E).t());  // [V, 3H]
  if (o.input_feeding()) w.w_feed = gru[0].narrow(1, E, o.hidden_size());
  for (int64_t l = 0; l < o.layers(); ++l) {
    w.w_ih.push_back(l > 0 ? gru[4 * l] : at::Tensor());
    w.w_hh.push_back(gru[4 * l + 1]);
    w.b_ih.push_back(gru[4 * l + 2]);
    w.b_hh.push_back(gru[4 * l + 3]);
  }
  const auto& score = d->attention->score;
  w.w_query = score->query_weight();
  const int64_t queries = w.w_query.size(1);
  w.w_key = score->linear->weight.narrow(1, queries, score->linear->weight.size(1) - queries);
  w.b_key = score->linear->bias;
  w.v = score->v ? score->v->weight.reshape({-1}) : at::ones({w.w_query.size(0)});
  w.w_combine = d->combine->weight;
  w.b_combine = d->combine->bias;
  w.w_output = d->output->weight;
  w.b_output = d->output->bias;
  return w;
}

// The packed weights, kept per decoder across searches and threads, and rebuilt when training
// or loading changes any of its parameters.
std::shared_ptr<const kernels::PackedDecoderWeights> packed_weights(const Decoder& d) {
  const auto type = d->options.compute_type();
  return derived_weights<kernels::PackedDecoderWeights>(
      d.ptr(),
      [&] { return std::make_shared<const kernels::PackedDecoderWeights>(step_weights(d), type); },
      /*tag=*/static_cast<uint32_t>(type));
}

const Decoder& checked(const Decoder& d) {
  TORCH_CHECK(FusedStep::supports(d),
              "FusedStep: this decoder's configuration needs the reference step");
  return d;
}

}  // namespace

bool FusedStep::supports(const Decoder& d) {
  const auto& o = d->options;
  if (!o.attention() || o.weighting() != WeightingKind::Soft) return false;
  if (o.score() != ScoreKind::Additive && o.score() != ScoreKind::Bahdanau) return false;
  const auto& score = d->attention->score;
  if (!score->linear || score->linear->options.bias() == false) return false;
  for (const auto& p : d->parameters())
    if (p.scalar_type() != at::kFloat || !p.device().is_cpu()) return false;
  return true;
}

FusedStep::FusedStep(const Decoder& d)
    : decoder_(d), weights_(packed_weights(checked(d))), step_(weights_) {}

DecoderState FusedStep::start(const EncoderOutput& encoded) {
  auto state = decoder_->start(encoded, weights_->project_keys(encoded.memory));
  state.source_row = at::arange(encoded.memory.size(0), at::kLong);
  return state;
}

StepOutput FusedStep::step(const at::Tensor& tokens, DecoderState& s) {
  kernels::DecoderStepInputs in;
  in.tokens = tokens;
  in.hidden = s.hidden;
  in.feed = s.feed;
  in.memory = s.memory;
  in.keys = s.keys;
  in.mask = s.mask;
  in.source_row = s.source_row;
  auto out = step_(in);
  s.hidden = out.hidden;
  s.feed = out.feed;
  StepOutput step;
  step.logits = out.logits;
  step.feed = out.feed;
  step.attention = out.attention;
  return step;
}

}  // namespace attnkit::rnn
