#include "attnkit/kernels/ops/additive_score.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <immintrin.h>
#include <torch/csrc/autograd/custom_function.h>

#include <cmath>
#include <vector>

#include "../cpu/simd.h"

namespace attnkit::kernels {
namespace {

using simd::tanh_dot;

class FusedAdditive : public torch::autograd::Function<FusedAdditive> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& q,
                            const at::Tensor& k, const at::Tensor& v) {
    const int64_t N = q.size(0), Tq = q.size(1), Tk = k.size(1), H = q.size(2);
    auto scores = at::empty({N, Tq, Tk}, q.options());
    const float *Q = q.data_ptr<float>(), *K = k.data_ptr<float>(), *Vv = v.data_ptr<float>();
    float* S = scores.data_ptr<float>();
    at::parallel_for(0, N * Tq, 1, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const int64_t n = r / Tq;
        for (int64_t j = 0; j < Tk; ++j)
          S[r * Tk + j] = tanh_dot(Q + r * H, K + (n * Tk + j) * H, Vv, H);
      }
    });
    ctx->save_for_backward({q, k, v});
    return scores;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const auto &q = saved[0], &k = saved[1], &v = saved[2];
    const auto g = grads[0].contiguous();
    const int64_t N = q.size(0), Tq = q.size(1), Tk = k.size(1), H = q.size(2);
    // With one query per row (decoder steps) each dk row is touched by one (i, j) only, so it is
    // zeroed there, while in cache, instead of in a separate [N, Tk, H] pass.
    auto dq = at::zeros_like(q), dk = Tq == 1 ? at::empty_like(k) : at::zeros_like(k);
    const int threads = at::get_num_threads();
    auto dv_parts = at::zeros({threads, H}, v.options());  // per-thread sums, reduced below
    const float *Q = q.data_ptr<float>(), *K = k.data_ptr<float>(), *Vv = v.data_ptr<float>(),
                *G = g.data_ptr<float>();
    float *dQ = dq.data_ptr<float>(), *dK = dk.data_ptr<float>(), *dV = dv_parts.data_ptr<float>();
    // By sentence: each thread owns its sentences' dq and dk rows.
    at::parallel_for(0, N, 1, [&](int64_t begin, int64_t end) {
      float* dv = dV + at::get_thread_num() * H;
      for (int64_t n = begin; n < end; ++n)
        for (int64_t i = 0; i < Tq; ++i)
          for (int64_t j = 0; j < Tk; ++j) {
            const float gij = G[(n * Tq + i) * Tk + j];
            if (Tq == 1) std::fill(dK + (n * Tk + j) * H, dK + (n * Tk + j + 1) * H, 0.f);
            if (gij == 0.f) continue;
            simd::tanh_backward(Q + (n * Tq + i) * H, K + (n * Tk + j) * H, Vv, gij,
                                dQ + (n * Tq + i) * H, dK + (n * Tk + j) * H, dv, H);
          }
    });
    return {dq, dk, dv_parts.sum(0)};
  }
};

}  // namespace

at::Tensor fused_additive_score(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  TORCH_CHECK(q.dim() == 3 && k.dim() == 3 && q.size(0) == k.size(0) && q.size(2) == k.size(2),
              "fused_additive_score: Q ", q.sizes(), " and K ", k.sizes(),
              " must be [N, Tq, H] and [N, Tk, H]");
  TORCH_CHECK(
      q.scalar_type() == at::kFloat && k.scalar_type() == at::kFloat,
      "fused_additive_score: float32 only (use functional::additive_score_projected otherwise)");
  const auto weights = v.defined() ? v.reshape({-1}) : at::ones({q.size(2)}, q.options());
  TORCH_CHECK(weights.numel() == q.size(2), "fused_additive_score: v has ", weights.numel(),
              " elements but H = ", q.size(2));
  return FusedAdditive::apply(q.contiguous(), k.contiguous(), weights.contiguous());
}

}  // namespace attnkit::kernels
