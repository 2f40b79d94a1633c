#include "attnkit/kernels/loss.h"

#include <ATen/ATen.h>
#include <ATen/record_function.h>
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "simd.h"

namespace attnkit::kernels {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

template <typename T>
T row_max(const T* x, int64_t n) {
  if constexpr (std::is_same_v<T, float>) return simd::max_of(x, n);
  return *std::max_element(x, x + n);
}

template <typename T>
T row_sum(const T* x, int64_t n) {
  if constexpr (std::is_same_v<T, float>) return simd::sum_of(x, n);
  T total = 0;
  for (int64_t j = 0; j < n; ++j) total += x[j];
  return total;
}

// sum_j exp(x[j] - m), writing the terms to `out`.
template <typename T>
T exp_sum(const T* x, T* out, int64_t n, T m) {
  if constexpr (std::is_same_v<T, float>) {
    return simd::exp_shift(x, out, static_cast<int>(n), m);
  } else {
    T sum = 0;
    for (int64_t j = 0; j < n; ++j) sum += (out[j] = std::exp(x[j] - m));
    return sum;
  }
}

// out[j] = a exp(x[j] - m) + b.
template <typename T>
void exp_affine(const T* x, T* out, int64_t n, T m, T a, T b) {
  if constexpr (std::is_same_v<T, float>) {
    simd::exp_affine(x, out, n, m, a, b);
  } else {
    for (int64_t j = 0; j < n; ++j) out[j] = a * std::exp(x[j] - m) + b;
  }
}

class SmoothedCrossEntropy : public torch::autograd::Function<SmoothedCrossEntropy> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& logits,
                            const at::Tensor& target, double eps, int64_t ignore) {
    RECORD_FUNCTION("attnkit::label_smoothed_cross_entropy", std::vector<c10::IValue>());
    const int64_t M = logits.size(0), V = logits.size(1);
    auto loss = at::zeros({M}, logits.options());
    auto lse = at::zeros({M}, logits.options());
    const int64_t* tgt = target.data_ptr<int64_t>();
    AT_DISPATCH_FLOATING_TYPES(logits.scalar_type(), "label_smoothed_cross_entropy", [&] {
      const scalar_t* X = logits.data_ptr<scalar_t>();
      scalar_t *L = loss.data_ptr<scalar_t>(), *Z = lse.data_ptr<scalar_t>();
      at::parallel_for(0, M, 16, [&](int64_t begin, int64_t end) {
        std::vector<scalar_t> scratch(V);
        for (int64_t m = begin; m < end; ++m) {
          if (tgt[m] == ignore) continue;
          const scalar_t* x = X + m * V;
          const scalar_t mx = row_max(x, V);
          const scalar_t z = mx + std::log(exp_sum<scalar_t>(x, scratch.data(), V, mx));
          const scalar_t total = row_sum(x, V);
          Z[m] = z;
          L[m] = (1 - eps) * (z - x[tgt[m]]) + eps * (z - total / V);
        }
      });
    });
    ctx->save_for_backward({logits, target, lse});
    ctx->saved_data["eps"] = eps;
    ctx->saved_data["ignore"] = ignore;
    return loss;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const auto &logits = saved[0], &target = saved[1], &lse = saved[2];
    const double eps = ctx->saved_data["eps"].toDouble();
    const int64_t ignore = ctx->saved_data["ignore"].toInt();
    const auto g = grads[0].contiguous();
    const int64_t M = logits.size(0), V = logits.size(1);
    auto d = at::empty_like(logits);  // [M, V]
    const int64_t* tgt = target.data_ptr<int64_t>();
    AT_DISPATCH_FLOATING_TYPES(logits.scalar_type(), "label_smoothed_cross_entropy_backward", [&] {
      const scalar_t *X = logits.data_ptr<scalar_t>(), *Z = lse.data_ptr<scalar_t>(),
                     *G = g.data_ptr<scalar_t>();
      scalar_t* D = d.data_ptr<scalar_t>();
      at::parallel_for(0, M, 16, [&](int64_t begin, int64_t end) {
        for (int64_t m = begin; m < end; ++m) {
          scalar_t* row = D + m * V;
          if (tgt[m] == ignore || G[m] == 0) {
            std::fill(row, row + V, scalar_t(0));
            continue;
          }
          // d/dx_j = g (softmax_j - eps / V - (1 - eps) [j == t])
          const scalar_t gm = G[m];
          exp_affine<scalar_t>(X + m * V, row, V, Z[m], gm, -gm * static_cast<scalar_t>(eps / V));
          row[tgt[m]] -= gm * (1 - eps);
        }
      });
    });
    return {d, {}, {}, {}};
  }
};

}  // namespace

at::Tensor label_smoothed_cross_entropy(const at::Tensor& logits, const at::Tensor& target,
                                        double smoothing, int64_t ignore_index) {
  TORCH_CHECK(logits.dim() == 2, "label_smoothed_cross_entropy: logits must be [M, V], got ",
              logits.sizes());
  TORCH_CHECK(
      target.dim() == 1 && target.size(0) == logits.size(0) && target.scalar_type() == at::kLong,
      "label_smoothed_cross_entropy: target must be [M] = [", logits.size(0), "] long, got ",
      target.sizes(), " ", target.scalar_type());
  TORCH_CHECK(smoothing >= 0 && smoothing < 1,
              "label_smoothed_cross_entropy: smoothing must be in [0, 1), got ", smoothing);
  auto t = target.contiguous();
  const auto valid = (t == ignore_index) | ((t >= 0) & (t < logits.size(1)));
  TORCH_CHECK(valid.all().item<bool>(),
              "label_smoothed_cross_entropy: a target id is outside [0, V = ", logits.size(1), ")");
  return SmoothedCrossEntropy::apply(logits.contiguous(), t, smoothing, ignore_index);
}

}  // namespace attnkit::kernels
