#pragma once

#include <ATen/core/Tensor.h>

// A whole teacher-forced decoder pass, as training runs it, in one autograd node. Step t
// (t = 0 .. T-1, feed_{-1} = 0) of a one-layer GRU decoder with additive attention and input
// feeding:
//   h_t    = GRU(gates[:, t] + W_feed feed_{t-1}, h_{t-1})          (kernels/gru.h's cell)
//   a_t    = masked softmax over s of  sum_a v[a] tanh((W_q h_t)[a] + keys[s, a])
//   c_t    = sum_s a_t[s] memory[s]
//   feed_t = tanh(W_c [h_t; c_t] + b_c)
// Run step by step through autograd, each step is a dozen nodes whose backward allocates a
// fresh [B, S, Hm] gradient for the memory and another for the keys and adds them up, and
// multiplies every weight's gradient by a 64-row slice. Here the backward through time is
// written out: those gradients accumulate in place, and each weight's gradient is one product
// over all T steps. The step-by-step decoder (Seq2Seq with the per-step path) stays the
// reference: tests/test_attention_decoder.cpp compares values and every gradient, and checks
// this kernel against finite differences in double precision.
namespace attnkit::kernels {

struct AttentionDecoderInputs {
  at::Tensor gates;      // [B, T, 3H]: each step token's share of W_ih x + b_ih
  at::Tensor h0;         // [B, H]: the state before the first step
  at::Tensor w_feed;     // [3H, H]: the feed's columns of W_ih; undefined: no input feeding
  at::Tensor w_hh;       // [3H, H]
  at::Tensor b_hh;       // [3H]
  at::Tensor w_query;    // [A, H]: the query's columns of the score's linear layer
  at::Tensor keys;       // [B, S, A]: the keys' columns times the memory, plus the bias
  at::Tensor v;          // [A]: Bahdanau's v; undefined: a plain sum over A (the notes' score 2)
  at::Tensor memory;     // [B, S, Hm]
  at::Tensor keep;       // bool, broadcastable to [B, S]; true = attend; undefined: attend all
  at::Tensor w_combine;  // [H, H + Hm]
  at::Tensor b_combine;  // [H]
  at::Tensor lengths;    // [B] integers in [0, T]: the steps each row runs; undefined: all T
};

// Past a row's length both outputs are zero and nothing is computed: a batch of targets of
// different lengths costs the steps its rows run, not B x T.
struct AttentionDecoderOutputs {
  at::Tensor feeds;    // [B, T, H]: feed_t, the input of the output layer
  at::Tensor weights;  // [B, T, S]: a_t; a row with nothing to attend to is all zeros
};

// Float or double, on the CPU; differentiable in every tensor input but keep.
AttentionDecoderOutputs attention_decoder(const AttentionDecoderInputs& in);

}  // namespace attnkit::kernels
