#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/modules/rnn.h>

#include <tuple>

// Which implementation each of a model's ops runs: attnkit's fused kernel, or LibTorch's
// composite reference that the kernel is tested against. The layers call these ops instead of
// branching on the choice themselves, so the choice, and what each kernel supports, is made in
// one place per op (as CTranslate2's ops dispatch for their callers). Both paths take and give
// the same tensors and parameters, and agree to rounding (tests/test_gru.cpp,
// tests/test_attention_decoder.cpp, tests/test_step_kernels.cpp).
namespace attnkit::kernels::dispatch {

enum class Path {
  Reference,  // LibTorch's modules and ops
  Fused,      // attnkit's kernels (kernels/*.h), where they cover the inputs
};

inline Path path(bool fused_kernels) { return fused_kernels ? Path::Fused : Path::Reference; }

// Inverted dropout: kernels::dropout (a counter-based mask, no mask tensor kept) or at::dropout.
at::Tensor dropout(Path path, const at::Tensor& x, double p, bool training);

// x W^T + b: kernels::linear (a hand-written backward on the packed products) or at::linear.
at::Tensor linear(Path path, const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias);

// A (bidirectional, multi-layer) GRU over padded sequences: embedded [B, S, E], lengths [B] ->
// (outputs [B, S, H * dirs] with zeros past each length, final states [layers * dirs, B, H]).
// Reference: the module on a packed sequence. Fused: per layer and direction, one input GEMM
// for all steps and kernels::gru_sequence; dropout between layers as the module applies it.
std::tuple<at::Tensor, at::Tensor> gru(Path path, torch::nn::GRU& gru, const at::Tensor& embedded,
                                       const at::Tensor& lengths, bool training);

// One step of a (multi-layer, one-direction) GRU: input [N, I], hidden [layers, N, H] -> new
// hidden [layers, N, H]. Reference: the module on a one-step sequence. Fused: gru_step_gates on
// the first layer's input projection.
at::Tensor gru_step(Path path, torch::nn::GRU& gru, const at::Tensor& input,
                    const at::Tensor& hidden, bool training);

// The same step from the first layer's input projection, gates [N, 3H] = W_ih input + b_ih, as
// teacher forcing computes it for all steps at once: kernels::gru_cell per layer. Fused only (the
// module takes inputs, not gates).
at::Tensor gru_step_gates(torch::nn::GRU& gru, const at::Tensor& gates, const at::Tensor& hidden,
                          bool training);

}  // namespace attnkit::kernels::dispatch
