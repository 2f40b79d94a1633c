#pragma once

#include <ATen/core/Tensor.h>

// The additive score's inner loop, fused: scores[n, i, j] = sum_h v[h] tanh(q[n, i, h] + k[n, j,
// h]) without materialising the [N, Tq, Tk, H] tensor of the composite path (164 MB for a 64 x 50 x
// 50 x 256 sequence). The tanh is vectorised with AVX2/FMA where available; the backward pass
// recomputes it. functional::additive_score_projected stays the reference.
namespace attnkit::kernels {

// q [N, Tq, H] (W_q q), k [N, Tk, H] (W_k K + b, projected once per source), v [H] (Bahdanau's
// v; undefined: a sum over h, the notes' formula 2). float32. Returns [N, Tq, Tk];
// differentiable in q, k and v.
at::Tensor fused_additive_score(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v = {});

}  // namespace attnkit::kernels
