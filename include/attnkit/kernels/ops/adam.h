#pragma once

#include <cstdint>
#include <vector>

// One Adam update of a float32 parameter in a single pass over p, g, m and v. LibTorch's
// torch::optim::Adam spends about eight passes (mul_, add_, mul_, addcmul_, sqrt, div, add_,
// addcdiv_) with two temporaries per parameter; this is its arithmetic in one loop, AVX2 where
// available. train::adam_step drives it over an optimizer's state; torch::optim::Adam::step stays
// the reference (tests/test_step_kernels.cpp).
namespace attnkit::kernels {

struct AdamUpdate {
  float beta1, beta2, eps;
  float step_size;              // lr / (1 - beta1^step)
  float sqrt_bias_correction2;  // sqrt(1 - beta2^step)
  float grad_scale = 1;         // g below is the gradient times this (a clipping factor)
};

// m = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g^2;
// p -= step_size m / (sqrt(v) / sqrt_bias_correction2 + eps)
void adam_update(float* p, const float* g, float* m, float* v, int64_t n, const AdamUpdate& u);

// One parameter of a step: its n elements and their update.
struct AdamTensor {
  float* p;
  const float* g;
  float* m;
  float* v;
  int64_t n;
  AdamUpdate u;
};

// A whole step's parameters in one pass split between the threads (every element on its own, so
// the same bits on any thread count). Parameter by parameter, the small ones (biases, norms,
// the GRU's recurrent weights) were too small to split and ran on one thread.
void adam_update(const std::vector<AdamTensor>& tensors);

}  // namespace attnkit::kernels
