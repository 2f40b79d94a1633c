#pragma once

#include <ATen/core/Tensor.h>

// Fused scaled-dot attention for CPU: softmax(Q Kᵀ · scale, mask) V computed block by block
// with an online softmax (flash-attention style), so the [Tq, Tk] score matrix is never stored:
// memory stays O(T·d) for the forward pass and for the backward pass, which recomputes the
// scores from Q, K and the saved log-sum-exp. Blocks are multiplied on attnkit's packed register
// blocks (src/kernels/packed_gemm.h): K, V, Q and dO are packed once per (batch × head) row, in
// the layout each product reads, and Pᵀ and dSᵀ are read in place. The exponentials are vectorised
// with AVX2/FMA; both follow cpu_isa() (kernels/cpu_isa.h). Threads go over the batch dimension
// (batch × heads). functional::scaled_dot_product_attention stays the reference path
// (tests/test_fused_attention.cpp, values and gradients in double).
namespace attnkit::kernels {

// q [N, Tq, d], k [N, Tk, d], v [N, Tk, dv], float32; mask (optional) bool, broadcastable to
// [N, Tq, Tk], true = attend. Returns the output [N, Tq, dv]; differentiable in q, k and v.
// A row with no key to attend to gets a zero output and zero gradients, never NaN.
at::Tensor fused_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                           const at::Tensor& mask = {}, double scale = -1);

// Multi-head attention straight from the projections, with no head split or merged in memory
// (in the profile of a Transformer training step, the head reshapes' copies and the gradients of
// their selects took 7 %): each head reads its columns where the in-projection wrote them, and
// writes its output where the out-projection reads it. Self-attention: q is the one [B, T, 3E]
// projection (queries, keys, values side by side, as MultiheadAttention's in_proj_weight makes
// them) and kv undefined. Cross-attention: q [B, Tq, E] and kv [B, Tk, 2E] (keys, then values).
// `heads` divides E; mask (optional) bool, broadcastable to [B, Tq, Tk], true = attend, shared by
// the heads. Returns [B, Tq, E], head h in columns h E/H ..; differentiable in q and kv, whose
// gradients come in the same layout. The same kernel as fused_attention, row for row
// (tests/test_fused_attention.cpp holds it to the composite and to fused_attention on split
// heads).
at::Tensor fused_multihead_attention(const at::Tensor& q, const at::Tensor& kv, int64_t heads,
                                     const at::Tensor& mask = {}, double scale = -1);

}  // namespace attnkit::kernels
