#include "attnkit/rnn/model.h"

#include <ATen/ATen.h>
#include <torch/nn/options/embedding.h>
#include <torch/nn/options/rnn.h>

#include "../core/derived_weights.h"
#include "attnkit/attention/mask.h"
#include "attnkit/kernels/blocks/attention_decoder.h"
#include "attnkit/kernels/blocks/gru_encoder.h"
#include "attnkit/kernels/gemm/packed_linear.h"
#include "attnkit/kernels/ops/column_split.h"
#include "attnkit/kernels/ops/dispatch.h"
#include "attnkit/kernels/ops/embedding.h"

namespace attnkit::rnn {
namespace {

using torch::nn::Embedding;
using torch::nn::EmbeddingOptions;
using torch::nn::GRU;
using torch::nn::GRUOptions;
using torch::nn::Linear;

int64_t directions(const RnnOptions& o) { return o.bidirectional() ? 2 : 1; }
int64_t memory_size(const RnnOptions& o) { return o.hidden_size() * directions(o); }

int64_t decoder_input_size(const RnnOptions& o) {
  return o.embed_size() + (o.input_feeding() ? o.hidden_size() : 0) +
         (o.attention() ? 0 : memory_size(o));
}

namespace dispatch = kernels::dispatch;

// Which implementation the model's ops run (kernels/dispatch.h decides per op).
dispatch::Path path(const RnnOptions& o) { return dispatch::path(o.fused_kernels()); }

at::Tensor drop(const at::Tensor& x, double p, const RnnOptions& o, bool training) {
  return dispatch::dropout(path(o), x, p, training);
}

}  // namespace

EncoderImpl::EncoderImpl(const RnnOptions& o)
    : options(o),
      embedding(EmbeddingOptions(o.source_vocab(), o.embed_size()).padding_idx(0)),
      gru(GRUOptions(o.embed_size(), o.hidden_size())
              .num_layers(o.layers())
              .bidirectional(o.bidirectional())
              .batch_first(true)
              .dropout(o.layers() > 1 ? o.dropout() : 0.0)),
      bridge(memory_size(o), o.hidden_size()),
      self_attention(),
      self_attention_norm() {
  register_module("embedding", embedding);
  register_module("gru", gru);
  register_module("bridge", bridge);
  for (int64_t i = 0; i < o.self_attention_layers(); ++i) {
    self_attention->push_back(
        MultiheadAttention(MultiheadAttentionOptions(memory_size(o), o.self_attention_heads())));
    self_attention_norm->push_back(
        torch::nn::LayerNorm(torch::nn::LayerNormOptions({memory_size(o)})));
  }
  register_module("self_attention", self_attention);
  register_module("self_attention_norm", self_attention_norm);
}

struct EncoderImpl::Packed {
  kernels::PackedGru gru;
  kernels::PackedLinear bridge;
};

std::shared_ptr<const EncoderImpl::Packed> EncoderImpl::packed_weights() {
  if (!options.fused_kernels()) return nullptr;
  for (const auto& p : parameters())
    if (p.scalar_type() != at::kFloat || !p.device().is_cpu()) return nullptr;
  auto self = std::dynamic_pointer_cast<EncoderImpl>(shared_from_this());
  const auto type = options.compute_type();
  return derived_weights<Packed>(
      self,
      [&] {
        const auto w = gru->all_weights();  // w_ih, w_hh, b_ih, b_hh per layer-direction
        std::vector<kernels::GruWeights> layers;
        for (size_t i = 0; i + 3 < w.size(); i += 4)
          layers.push_back({w[i], w[i + 1], w[i + 2], w[i + 3]});
        auto p = std::make_shared<Packed>();
        p->gru = kernels::PackedGru(layers, directions(options), type);
        p->bridge = kernels::PackedLinear(bridge->weight, bridge->bias, type);
        return std::shared_ptr<const Packed>(std::move(p));
      },
      /*tag=*/static_cast<uint32_t>(type));
}

EncoderOutput EncoderImpl::forward(const at::Tensor& source, const at::Tensor& lengths,
                                   bool packed) {
  TORCH_CHECK(source.dim() == 2, "Encoder: source must be [B, S] token ids, got ", source.sizes());
  TORCH_CHECK(lengths.dim() == 1 && lengths.size(0) == source.size(0), "Encoder: lengths ",
              lengths.sizes(), " must be [B] for source ", source.sizes());
  TORCH_CHECK(lengths.numel() == 0 || lengths.min().item<int64_t>() >= 1,
              "Encoder: every source needs at least one token");
  const int64_t batch = source.size(0), len = source.size(1), layers = options.layers();
  const auto weights =
      packed && !is_training() && !at::GradMode::is_enabled() ? packed_weights() : nullptr;
  auto embedded = drop(
      kernels::embedding(embedding->weight, source, embedding->options.padding_idx().value_or(-1)),
      options.dropout(), options, is_training());  // [B, S, E]
  auto [memory, h_n] = weights ? weights->gru(embedded, lengths)
                               : run_gru(embedded, lengths);  // [B, S, Hm], [layers * dirs, B, H]
  // h_n [layers * dirs, B, H] -> the final states of both directions side by side.
  auto finals = h_n.view({layers, directions(options), batch, options.hidden_size()})
                    .permute({0, 2, 1, 3})
                    .reshape({layers, batch, memory_size(options)});  // [layers, B, Hm]
  auto mask = padding_mask(lengths, len);                             // [B, 1, S]
  for (size_t i = 0; i < self_attention->size(); ++i) {
    auto attended =
        self_attention[i]->as<MultiheadAttention>()->forward(memory, memory, memory, mask);
    auto residual = drop(attended.output, options.dropout(), options, is_training());
    memory = self_attention_norm[i]->as<torch::nn::LayerNorm>()->forward(memory + residual);
  }
  // On the packed products when training, not through at::linear's single-threaded GEMM.
  auto state = weights ? weights->bridge(finals)
                       : dispatch::linear(path(options), finals, bridge->weight,
                                          bridge->bias);  // [layers, B, H]
  return {drop(memory, options.dropout(), options, is_training()), mask, at::tanh(state),
          finals[layers - 1]};
}

std::tuple<at::Tensor, at::Tensor> EncoderImpl::run_gru(const at::Tensor& embedded,
                                                        const at::Tensor& lengths) {
  return dispatch::gru(path(options), gru, embedded, lengths, is_training());
}

DecoderState DecoderState::select(const at::Tensor& index) const {
  return reorder_beams(index, index);
}

DecoderState DecoderState::reorder_beams(const at::Tensor& origin,
                                         const at::Tensor& source_rows) const {
  DecoderState s = *this;
  s.hidden = hidden.index_select(1, origin);
  s.feed = feed.index_select(0, origin);
  if (source_row.defined()) {
    s.source_row = source_row.index_select(0, origin);
  } else if (source_rows.defined()) {
    s.memory = memory.index_select(0, source_rows);
    s.keys = keys.index_select(0, source_rows);
    s.mask = mask.index_select(0, source_rows);
    s.summary = summary.index_select(0, source_rows);
  }
  return s;
}

DecoderImpl::DecoderImpl(const RnnOptions& o)
    : options(o),
      embedding(EmbeddingOptions(o.target_vocab(), o.embed_size()).padding_idx(0)),
      gru(GRUOptions(decoder_input_size(o), o.hidden_size())
              .num_layers(o.layers())
              .batch_first(true)
              .dropout(o.layers() > 1 ? o.dropout() : 0.0)),
      combine(o.hidden_size() + memory_size(o), o.hidden_size()),
      output(o.hidden_size(), o.target_vocab()) {
  register_module("embedding", embedding);
  register_module("gru", gru);
  if (o.attention()) {
    attention =
        register_module("attention", Attention(AttentionOptions(o.hidden_size(), memory_size(o))
                                                   .score(o.score())
                                                   .weighting(o.weighting())
                                                   .hard_gradient(o.hard_gradient())
                                                   .temperature(o.temperature())
                                                   .window(o.window())
                                                   .hidden_size(o.hidden_size())));
  }
  register_module("combine", combine);
  register_module("output", output);
}

DecoderState DecoderImpl::start(const EncoderOutput& e, const at::Tensor& keys) {
  const int64_t batch = e.memory.size(0);
  DecoderState s;
  s.hidden = e.state;                                                         // [L, B, H]
  s.feed = at::zeros({batch, 1, options.hidden_size()}, e.memory.options());  // [B, 1, H]
  s.memory = e.memory;
  s.keys = keys.defined() ? keys
           : attention    ? attention->project_keys(e.memory)
                          : e.memory;  // once per source
  s.mask = e.mask;
  s.summary = e.summary;
  if (attention) s.query_weight = attention->score->query_weight();
  return s;
}

at::Tensor DecoderImpl::rest_of_input(const DecoderState& s) const {
  std::vector<at::Tensor> parts;
  if (options.input_feeding()) parts.push_back(s.feed.squeeze(1));  // [N, H]
  if (!attention) parts.push_back(s.summary);                       // [N, Hm]
  if (parts.empty()) return {};
  return parts.size() == 1 ? parts[0] : at::cat(parts, -1);
}

StepOutput DecoderImpl::step(const at::Tensor& tokens, DecoderState& s, bool project_now) {
  auto input =
      drop(embedding(tokens.view({-1})), options.dropout(), options, is_training());  // [N, E]
  auto rest = rest_of_input(s);
  s.hidden = run_gru(rest.defined() ? at::cat({input, rest}, -1) : input, s.hidden);  // [L, N, H]
  return finish_step(s, project_now);
}

ForcedInputs DecoderImpl::force_inputs(const at::Tensor& tokens) {
  TORCH_CHECK(options.fused_kernels(), "Decoder::force_inputs needs fused_kernels");
  const auto weights = gru->all_weights();  // layer 0: w_ih [3H, I], b_ih [3H]
  const int64_t E = options.embed_size(), I = weights[0].size(1);
  auto embedded = drop(
      kernels::embedding(embedding->weight, tokens, embedding->options.padding_idx().value_or(-1)),
      options.dropout(), options, is_training());  // [B, T, E]
  ForcedInputs in;
  // W_ih's embedding and feed columns, with one gradient node for both when there is a feed.
  auto [w_embedding, w_rest] =
      I > E ? kernels::split_columns(weights[0], E) : std::pair{weights[0], at::Tensor()};
  in.all_gates = dispatch::linear(path(options), embedded, w_embedding,
                                  weights[2]);               // [B, T, 3H]
  in.w_rest = w_rest;                                        // [3H, I - E]
  if (!fuses_sequence()) in.gates = in.all_gates.unbind(1);  // T x [B, 3H]
  return in;
}

bool DecoderImpl::fuses_sequence() const {
  const auto& o = options;
  if (!o.fused_kernels() || o.layers() != 1 || !attention) return false;
  if (o.weighting() != WeightingKind::Soft) return false;
  if (o.score() != ScoreKind::Additive && o.score() != ScoreKind::Bahdanau) return false;
  for (const auto& p : parameters())
    if (p.scalar_type() != at::kFloat || !p.device().is_cpu()) return false;
  return true;
}

std::pair<at::Tensor, at::Tensor> DecoderImpl::forced_sequence(const ForcedInputs& in,
                                                               const DecoderState& s,
                                                               const at::Tensor& steps) {
  TORCH_CHECK(fuses_sequence(), "Decoder::forced_sequence: this configuration needs forced_step");
  const auto weights = gru->all_weights();  // w_ih, w_hh, b_ih, b_hh
  const auto& score = attention->score;
  kernels::AttentionDecoderInputs k;
  k.gates = in.all_gates;  // [B, T, 3H]
  k.h0 = s.hidden[0];      // [B, H]
  k.w_feed = in.w_rest;    // [3H, H] with input feeding (the only rest with attention)
  k.w_hh = weights[1];
  k.b_hh = weights[3];
  k.w_query = s.query_weight;  // [A, H]
  k.keys = s.keys;             // [B, S, A]
  if (score->v) k.v = score->v->weight;
  k.memory = s.memory;  // [B, S, Hm]
  k.keep = s.mask;      // [B, 1, S]
  k.w_combine = combine->weight;
  k.b_combine = combine->bias;
  k.lengths = steps;
  auto out = kernels::attention_decoder(k);
  return {out.feeds, out.weights};
}

StepOutput DecoderImpl::forced_step(const ForcedInputs& in, int64_t t, DecoderState& s) {
  auto gates = in.gates[t];  // [N, 3H]
  auto rest = rest_of_input(s);
  if (rest.defined()) gates = at::addmm(gates, rest, in.w_rest.t());
  s.hidden = run_gru_from_gates(gates, s.hidden);  // [L, N, H]
  return finish_step(s, /*project=*/false);
}

StepOutput DecoderImpl::finish_step(DecoderState& s, bool project_now) {
  auto out = s.hidden[options.layers() - 1].unsqueeze(1);  // [N, 1, H]
  StepOutput step;
  at::Tensor context;
  if (attention) {
    auto a = attention->attend(out, s.keys, s.memory, s.mask,
                               s.query_weight);  // [N, 1, Hm], [N, 1, S]
    context = a.output;
    step.attention = a.weights.squeeze(1);
    if (a.log_prob.defined()) {
      step.log_prob = a.log_prob.squeeze(1);
      step.entropy = a.entropy.squeeze(1);
    }
  } else {
    context = s.summary.unsqueeze(1);
    step.attention = at::zeros({out.size(0), s.memory.size(1)}, out.options());
  }
  s.feed = at::tanh(combine(at::cat({out, context}, -1)));  // [N, 1, H]
  step.feed = s.feed;
  if (project_now) step.logits = project(s.feed).squeeze(1);  // [N, V]
  return step;
}

at::Tensor DecoderImpl::run_gru(const at::Tensor& input, const at::Tensor& hidden) {
  return dispatch::gru_step(path(options), gru, input, hidden, is_training());
}

at::Tensor DecoderImpl::run_gru_from_gates(const at::Tensor& gates, const at::Tensor& hidden) {
  return dispatch::gru_step_gates(gru, gates, hidden, is_training());
}

at::Tensor DecoderImpl::head_input(const at::Tensor& feed) {
  return drop(feed, options.dropout(), options, is_training());
}

at::Tensor DecoderImpl::project(const at::Tensor& feed) {
  auto x = head_input(feed);
  return dispatch::linear(path(options), x, output->weight, output->bias);
}

RnnModelImpl::RnnModelImpl(RnnOptions o) : options(o), encoder(o), decoder(o) {
  register_module("encoder", encoder);
  register_module("decoder", decoder);
}

void RnnModelImpl::set_compute_type(kernels::ComputeType type) {
  options.compute_type(type);
  encoder->options.compute_type(type);
  decoder->options.compute_type(type);
}

ForwardOutput RnnModelImpl::forward(const at::Tensor& source, const at::Tensor& lengths,
                                    const at::Tensor& target_in, double teacher_forcing,
                                    const at::Tensor& positions, Head head) {
  TORCH_CHECK(target_in.dim() == 2 && target_in.size(0) == source.size(0), "Seq2Seq: target ",
              target_in.sizes(), " must be [B, T] for source ", source.sizes());
  TORCH_CHECK(!positions.defined() ||
                  (positions.scalar_type() == at::kBool && positions.sizes() == target_in.sizes()),
              "Seq2Seq: positions must be bool with the target's shape ", target_in.sizes());
  // [B, T, ...] -> [N, ...]: the wanted positions only, row-major.
  const at::Tensor wanted =
      positions.defined() ? positions.reshape({-1}).nonzero().squeeze(1) : at::Tensor();
  auto pick = [&](const at::Tensor& x) {
    return wanted.defined() ? x.reshape({-1, x.size(-1)}).index_select(0, wanted) : x;
  };
  TORCH_CHECK(head == Head::Logits || teacher_forcing >= 1.0,
              "Seq2Seq: Head::Features needs full teacher forcing (each step of a partly "
              "free-running decoder needs its logits)");
  // The end of the forward pass from the attentional vectors [..., H].
  auto finish = [&](const at::Tensor& feeds) {
    return head == Head::Features ? decoder->head_input(feeds) : decoder->project(feeds);
  };
  auto state = decoder->start(encoder->forward(source, lengths));
  // With full teacher forcing no step needs the previous step's prediction, so the output
  // layer runs once over all steps ([B*T, H] x [H, V]) instead of T times.
  const bool project_at_end = teacher_forcing >= 1.0;
  // ... and the step inputs are all known, so they are embedded and projected at once too.
  const bool forced = project_at_end && options.fused_kernels();
  const ForcedInputs inputs = forced ? decoder->force_inputs(target_in) : ForcedInputs{};
  if (forced && decoder->fuses_sequence()) {
    at::Tensor steps;  // [B]: each row's last wanted position + 1
    if (positions.defined())
      steps = (positions.to(at::kLong) * at::arange(1, target_in.size(1) + 1, at::kLong)).amax(1);
    auto [feeds, attention] =
        decoder->forced_sequence(inputs, state, steps);  // [B, T, H], [B, T, S]
    ForwardOutput f;
    (head == Head::Features ? f.features : f.logits) = finish(pick(feeds));
    f.attention = attention;
    return f;
  }
  std::vector<at::Tensor> logits, feeds, attention, log_prob, entropy;
  at::Tensor previous;
  for (int64_t t = 0; t < target_in.size(1); ++t) {
    at::Tensor tokens = target_in.select(1, t);  // [B]
    if (t > 0 && !project_at_end) {
      auto gold = at::rand({tokens.size(0)}) < teacher_forcing;
      tokens = at::where(gold, tokens, previous);
    }
    auto out = forced ? decoder->forced_step(inputs, t, state)
                      : decoder->step(tokens, state, /*project=*/!project_at_end);
    if (project_at_end) {
      feeds.push_back(out.feed);
    } else {
      previous = out.logits.argmax(-1).detach();
      logits.push_back(out.logits);
    }
    attention.push_back(out.attention);
    if (out.log_prob.defined()) {
      log_prob.push_back(out.log_prob);
      entropy.push_back(out.entropy);
    }
  }
  ForwardOutput f;
  auto end = project_at_end ? finish(pick(at::cat(feeds, 1)))
                            : pick(at::stack(logits, 1));  // [B, T, V] or [N, V] (or H)
  (head == Head::Features ? f.features : f.logits) = end;
  f.attention = at::stack(attention, 1);  // [B, T, S]
  if (!log_prob.empty()) {
    f.log_prob = at::stack(log_prob, 1);  // [B, T]
    f.entropy = at::stack(entropy, 1);
  }
  return f;
}

}  // namespace attnkit::rnn
