#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>
#include <torch/nn/modules/rnn.h>
#include <torch/nn/pimpl.h>

#include "attnkit/attention/attention.h"
#include "attnkit/attention/self_attention.h"
#include "attnkit/kernels/gemm/compute_type.h"

// The second note's Seq2Seq with attention: an Embedding + GRU encoder, and a GRU decoder that
// attends over the encoder states at every step.
namespace attnkit::rnn {

struct RnnOptions {
  RnnOptions(int64_t source_vocab, int64_t target_vocab)
      : source_vocab_(source_vocab), target_vocab_(target_vocab) {}
  TORCH_ARG(int64_t, source_vocab);
  TORCH_ARG(int64_t, target_vocab);
  TORCH_ARG(int64_t, embed_size) = 128;
  TORCH_ARG(int64_t, hidden_size) = 256;
  TORCH_ARG(int64_t, layers) = 1;
  TORCH_ARG(bool, bidirectional) = true;
  TORCH_ARG(double, dropout) = 0.1;
  // false: the notes' design before attention, one fixed context C for every step.
  TORCH_ARG(bool, attention) = true;
  TORCH_ARG(ScoreKind, score) = ScoreKind::Bahdanau;
  TORCH_ARG(WeightingKind, weighting) = WeightingKind::Soft;
  TORCH_ARG(HardGradient, hard_gradient) = HardGradient::StraightThrough;
  TORCH_ARG(double, temperature) = 1.0;
  TORCH_ARG(int64_t, window) = 4;
  // Feed the previous step's attentional vector into the decoder GRU (Luong et al. 2015).
  TORCH_ARG(bool, input_feeding) = true;
  // Multi-head self-attention layers (residual + layer norm) over the encoder states.
  TORCH_ARG(int64_t, self_attention_layers) = 0;
  TORCH_ARG(int64_t, self_attention_heads) = 4;
  // Run the GRUs through kernels/gru.h (one input GEMM per sequence, a hand-written backward).
  // false: torch::nn::GRU, the reference. Same parameters and the same results either way.
  TORCH_ARG(bool, fused_kernels) = true;
  // What the searches' packed products compute in (kernels/compute_type.h): the encoder's and
  // every decoder step's; training is float32.
  TORCH_ARG(kernels::ComputeType, compute_type) = kernels::ComputeType::Float32;
};

struct EncoderOutput {
  at::Tensor memory;   // [B, S, Hm], Hm = hidden * directions
  at::Tensor mask;     // [B, 1, S], true on real tokens
  at::Tensor state;    // [layers, B, H]: the decoder's initial state
  at::Tensor summary;  // [B, Hm]: final states of both directions (the fixed context C)
};

class EncoderImpl : public torch::nn::Module {
 public:
  explicit EncoderImpl(const RnnOptions& options);
  // source [B, S] token ids (0 = padding), lengths [B] (>= 1). packed = true (eval mode, no
  // gradients, float32, fused kernels): the GRU and the bridge on weights packed once per model
  // (kernels/gru_encoder.h), as the searches encode; the same results to rounding.
  EncoderOutput forward(const at::Tensor& source, const at::Tensor& lengths, bool packed = false);
  // embedded [B, S, E] -> (outputs [B, S, Hm], final states [layers * dirs, B, H]).
  std::tuple<at::Tensor, at::Tensor> run_gru(const at::Tensor& embedded, const at::Tensor& lengths);

  RnnOptions options;
  torch::nn::Embedding embedding{nullptr};
  torch::nn::GRU gru{nullptr};
  torch::nn::Linear bridge{nullptr};
  torch::nn::ModuleList self_attention{nullptr};
  torch::nn::ModuleList self_attention_norm{nullptr};

 private:
  struct Packed;
  // The GRU's and the bridge's weights packed once per set of weights (core/derived_weights.h);
  // null when the configuration has no packed path.
  std::shared_ptr<const Packed> packed_weights();
};
TORCH_MODULE(Encoder);

// Everything a decoder step needs about the source and the steps so far; search strategies
// reorder it with select() as beams move.
struct DecoderState {
  at::Tensor hidden;   // [layers, N, H]
  at::Tensor feed;     // [N, 1, H]: the previous attentional vector (input feeding)
  at::Tensor memory;   // [N, S, Hm]
  at::Tensor keys;     // [N, S, *]: memory projected once by the attention score
  at::Tensor mask;     // [N, 1, S]
  at::Tensor summary;  // [N, Hm]
  // The score's query weights, viewed once per sequence (Score::query_weight); not per row.
  at::Tensor query_weight;
  // [N] long in FusedStep's states: row n's source fields are row source_row[n] of memory, keys,
  // mask and summary, so a sentence's beams share one copy that no reorder moves (as
  // CTranslate2 shares a sentence's cross-attention keys and values between its beams).
  // Undefined in DecoderImpl's: the source fields have a row per hypothesis.
  at::Tensor source_row;
  DecoderState select(const at::Tensor& index) const;  // rows `index` of every field
  // Beam search's reorder: hidden and feed take rows `origin`. The source fields, equal for
  // every beam of a sentence, take rows `source_rows` (or stay as they are when it is undefined);
  // with source_row, only source_row takes rows `origin`.
  DecoderState reorder_beams(const at::Tensor& origin, const at::Tensor& source_rows) const;
};

struct StepOutput {
  at::Tensor logits;     // [N, V] (undefined when the step was asked not to project)
  at::Tensor feed;       // [N, 1, H]: the attentional vector the logits come from
  at::Tensor attention;  // [N, S] (zeros for the no-attention baseline)
  at::Tensor log_prob;   // [N]: REINFORCE's log-probability of the sampled key, when sampling
  at::Tensor entropy;    // [N]: entropy of the attention distribution, when sampling
};

// Teacher forcing knows every step's input token up front, so the embeddings and the embedding
// columns of the first GRU layer's input projection run once over all steps: one GEMM and one
// embedding gradient instead of one per step.
struct ForcedInputs {
  // W_ih[:, :E] dropout(embed(token_t)) + b_ih for every step: [B, T, 3H].
  at::Tensor all_gates;
  // The same unbound into T x [B, 3H] for forced_step, once, so the backward stacks T gradients
  // instead of scattering each step's into a zero [B, T, 3H]. Empty when forced_sequence runs.
  std::vector<at::Tensor> gates;
  at::Tensor w_rest;  // [3H, I - E]: W_ih's columns for the rest of the input (undefined: none)
};

class DecoderImpl : public torch::nn::Module {
 public:
  explicit DecoderImpl(const RnnOptions& options);
  // `keys` [B, S, A]: the memory through the score's key projection, when the caller computed
  // it (FusedStep, on packed weights); undefined: computed here.
  DecoderState start(const EncoderOutput& encoded, const at::Tensor& keys = {});
  // tokens [N] -> logits for the next token; advances `state`. With project = false the
  // output layer is skipped, so a caller can apply project() to all steps in one GEMM.
  StepOutput step(const at::Tensor& tokens, DecoderState& state, bool project = true);
  // The same step for teacher forcing, from force_inputs(); never projects. Needs
  // options.fused_kernels() (the reference torch::nn::GRU takes whole inputs only).
  ForcedInputs force_inputs(const at::Tensor& tokens);  // tokens [B, T]
  StepOutput forced_step(const ForcedInputs& inputs, int64_t t, DecoderState& state);
  // Whether forced_sequence can run this decoder: fused kernels, one GRU layer, soft additive or
  // Bahdanau attention, float32 on the CPU.
  bool fuses_sequence() const;
  // Every forced step at once, as one autograd node (kernels/attention_decoder.h), from the
  // state start() returns: the attentional vectors [B, T, H] and attention weights [B, T, S].
  // steps ([B], optional): row b runs steps[b] steps only, its outputs after them are zero.
  std::pair<at::Tensor, at::Tensor> forced_sequence(const ForcedInputs& inputs,
                                                    const DecoderState& state,
                                                    const at::Tensor& steps = {});
  // Attentional vectors [..., H] -> logits [..., V].
  at::Tensor project(const at::Tensor& feed);
  // What the output layer multiplies: the attentional vectors after dropout.
  at::Tensor head_input(const at::Tensor& feed);
  // One GRU step: input [N, I], hidden [layers, N, H] -> new hidden [layers, N, H].
  at::Tensor run_gru(const at::Tensor& input, const at::Tensor& hidden);
  // The same with the first layer's input projection given: gates [N, 3H].
  at::Tensor run_gru_from_gates(const at::Tensor& gates, const at::Tensor& hidden);

 private:
  // The decoder GRU's input besides the embedding: [N, I - E] (feed, fixed context), or undefined.
  at::Tensor rest_of_input(const DecoderState& state) const;
  // Attention, combine and (optionally) output after the GRU has advanced `state`.
  StepOutput finish_step(DecoderState& state, bool project);

 public:
  RnnOptions options;
  torch::nn::Embedding embedding{nullptr};
  torch::nn::GRU gru{nullptr};
  Attention attention{nullptr};
  torch::nn::Linear combine{nullptr};  // the notes' Linear over [state; context]
  torch::nn::Linear output{nullptr};
};
TORCH_MODULE(Decoder);

// What Seq2Seq::forward ends with: the logits, or the output layer's input for a loss that
// applies the layer itself (train::projected_loss fuses the two).
enum class Head { Logits, Features };

struct ForwardOutput {
  at::Tensor logits;     // [B, T, V], or [N, V] for the positions Seq2Seq::forward was given
  at::Tensor features;   // Head::Features instead of logits: [B, T, H], or [N, H]
  at::Tensor attention;  // [B, T, S]
  at::Tensor log_prob;   // [B, T] (REINFORCE only)
  at::Tensor entropy;    // [B, T] (REINFORCE only)
};

class RnnModelImpl : public torch::nn::Module {
 public:
  explicit RnnModelImpl(RnnOptions options);
  // Teacher-forced decoding of `target_in` ([B, T], starting with <sos>); with
  // teacher_forcing < 1 a step feeds the model's own previous prediction with that chance.
  // `positions` ([B, T] bool, e.g. target_out != <pad>) asks for the logits of those positions
  // only: logits are then [N, V], the N true positions in row-major order (attention stays
  // [B, T, S]). The output layer then runs on N rows instead of B * T, and the fused decoder
  // (Decoder::fuses_sequence) stops each row after its last wanted position. Head::Features
  // (full teacher forcing only) returns the output layer's input instead of the logits.
  ForwardOutput forward(const at::Tensor& source, const at::Tensor& lengths,
                        const at::Tensor& target_in, double teacher_forcing = 1.0,
                        const at::Tensor& positions = {}, Head head = Head::Logits);

  // What the searches' packed products compute in, here and in the encoder's and decoder's
  // options (the packed weights follow it).
  void set_compute_type(kernels::ComputeType type);

  RnnOptions options;
  Encoder encoder{nullptr};
  Decoder decoder{nullptr};
};
TORCH_MODULE(RnnModel);

}  // namespace attnkit::rnn
