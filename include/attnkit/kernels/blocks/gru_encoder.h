#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "attnkit/kernels/gemm/packed_linear.h"

// A (bidirectional, multi-layer) GRU over padded sequences for inference, float32, on weights
// packed once per model. PyTorch's gate order and equations, as kernels/gru.h.
//
// Why it exists: the training kernel (kernels::gru_sequence) packs W_hh on every call and, below
// 8 rows, hands each row's recurrent product to BLAS's GEMV, and its input projection goes
// through kernels::linear, which does the same. At batch 1 those GEMVs were a quarter of greedy
// decoding's time where OpenBLAS runs its SSE3 kernels (it picks them on CPUs it does not know:
// Intel family 6 model 207), so decoding's speed depended on OpenBLAS's CPU detection. Here every
// product streams panels packed once (kernels::PackedLinear), the directions of a layer run side
// by side on two threads when there are threads to spare (no hand-off at every step), and nothing
// is kept for a backward pass.
//
// Reference: kernels::gru_sequence through dispatch::gru (and so torch::nn::GRU);
// tests/test_gru.cpp holds this to it, bidirectional and two layers, with padding.
namespace attnkit::kernels {

// One layer-direction's weights, PyTorch's shapes: w_ih [3H, I], w_hh [3H, H], b_ih, b_hh [3H].
struct GruWeights {
  at::Tensor w_ih, w_hh, b_ih, b_hh;
};

class PackedGru {
 public:
  PackedGru() = default;
  // weights[l * directions + d] (torch::nn::GRU's all_weights() order); layer l > 0 reads the
  // previous layer's outputs of all directions side by side. Views the weights: they must outlive
  // this and stay unchanged.
  PackedGru(const std::vector<GruWeights>& weights, int64_t directions,
            ComputeType type = ComputeType::Float32);

  // x [B, S, I] float32, lengths [B] (each 1..S) -> outputs [B, S, H * directions], zero past
  // each length, and final states [layers * directions, B, H]; no autograd.
  std::pair<at::Tensor, at::Tensor> operator()(const at::Tensor& x,
                                               const at::Tensor& lengths) const;

 private:
  // One layer-direction over the rows `order` (longest first, lengths `steps`): writes its
  // columns of `out` [B, S, H * directions] and its final states [B, H].
  void run(int64_t index, bool reverse, const float* x, int64_t batch, int64_t len, int64_t in,
           const std::vector<int64_t>& order, const std::vector<int64_t>& steps, float* out,
           float* final) const;

  std::vector<PackedLinear> input_, recurrent_;  // per layer-direction
  int64_t directions_ = 1, hidden_ = 0;
};

}  // namespace attnkit::kernels
