#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <tuple>

// The GRU recurrence, fused. PyTorch's gate order (r, z, n) and equations:
//   r = sigmoid(gi_r + gh_r)   z = sigmoid(gi_z + gh_z)   n = tanh(gi_n + r * gh_n)
//   h' = (1 - z) * n + z * h,  with gi = W_ih x + b_ih and gh = W_hh h + b_hh.
// The input projection gi is left to the caller, so a whole sequence projects its inputs in one
// GEMM. Each step is then one recurrent GEMM and one elementwise kernel, and the backward pass
// is written out by hand (the recurrent weight's gradient is one GEMM over all steps).
// torch::nn::GRU stays the reference: tests/test_gru.cpp compares values and gradients.
namespace attnkit::kernels {

// One step. gi [N, 3H], h [N, H], w_hh [3H, H], b_hh [3H] -> h' [N, H]. Float or double;
// differentiable in all four.
at::Tensor gru_cell(const at::Tensor& gi, const at::Tensor& h, const at::Tensor& w_hh,
                    const at::Tensor& b_hh);

// A whole layer-direction. gi [B, T, 3H] (every step's input projection), h0 [B, H],
// lengths [B] (integers >= 0). Row b runs steps 0 .. lengths[b] - 1, backwards when `reverse`,
// exactly like a packed sequence. Returns the outputs [B, T, H] (zero past each length) and the
// final states [B, H]. Differentiable in gi, h0, w_hh and b_hh.
std::tuple<at::Tensor, at::Tensor> gru_sequence(const at::Tensor& gi, const at::Tensor& h0,
                                                const at::Tensor& w_hh, const at::Tensor& b_hh,
                                                const at::Tensor& lengths, bool reverse);

// The elementwise half of a step on raw float32 rows, for inference code that runs its own
// GEMMs: gi, gh [n, 3H], h [n, H] -> h_out [n, H] (h_out may alias h).
void gru_gates(const float* gi, const float* gh, const float* h, float* h_out, int64_t n,
               int64_t hidden);

}  // namespace attnkit::kernels
