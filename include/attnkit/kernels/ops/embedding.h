#pragma once

#include <ATen/core/Tensor.h>

// An embedding lookup whose backward pass runs on the kernels' threads. ATen's dense embedding
// gradient zero-fills the whole [V, E] table and adds each position's row into it on one thread:
// under ThreadPolicy::Kernels about 0.7 % of a GRU training step's main-thread samples, with the
// other core waiting. Here the table's columns are split between the threads, and each thread
// adds the positions' rows in their order, as ATen's index_add does: the same bits on any thread
// count. at::embedding is the reference (tests/test_step_kernels.cpp, EmbeddingKernel.*).
namespace attnkit::kernels {

// weight [V, E], indices [...] (long or int) -> [..., E]; positions at padding_idx (if >= 0) get
// no gradient. Anything but a float or double CPU table takes at::embedding.
at::Tensor embedding(const at::Tensor& weight, const at::Tensor& indices, int64_t padding_idx);

// A Transformer's input in training: out[b, t] = weight[tokens[b, t]] * scale + positions[t],
// weight [V, E], tokens [B, T] (long or int), positions [T, E] (no gradient) -> [B, T, E]; the
// gradient reaches the weight, each position's row times scale, padding_idx's (if >= 0) none.
// The bits of embedding(weight, tokens) * scale + positions and of its gradient in one node: the
// multiplication, the addition and the multiplication's backward ran on one thread in LibTorch,
// 1.1 % of a Transformer training step's main-thread samples while its worker waited. Anything
// but float on the CPU takes that composite.
at::Tensor embed(const at::Tensor& weight, const at::Tensor& tokens, double scale,
                 const at::Tensor& positions, int64_t padding_idx);

// A decoding step's input, no gradient: out[n] = weight[ids[n]] * scale + position, weight [V, E]
// float, ids [N] long, position [E] (the step's sinusoid) -> [N, E]. The bits of
// embedding(weight, ids) * scale + position in one pass: the three ATen ops and their tensors
// were 2.0 % of a Transformer's beam search (perf, beam 5, batch 32, two batches at once on
// two Zen 5 cores), as much as its layer norms; this pass is 0.5 %.
at::Tensor embed_step(const at::Tensor& weight, const at::Tensor& ids, double scale,
                      const at::Tensor& position);

}  // namespace attnkit::kernels
