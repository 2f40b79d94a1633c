#include "attnkit/kernels/ops/loss.h"

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/record_function.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "../cpu/row_parts.h"
#include "../cpu/simd.h"
#include "../gemm/products.h"

namespace attnkit::kernels {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The per-row pieces (simd.h) run in float on the vector loops and in double (the gradient
// tests) on the scalar ones.
using simd::exp_affine;  // out[j] = a exp(x[j] - m) + b
using simd::max_of;
using simd::sum_of;

template <typename T>
T exp_sum(const T* x, T* out, int64_t n, T m) {  // sum_j exp(x[j] - m), the terms into `out`
  return simd::exp_shift(x, out, static_cast<int>(n), m);
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
          const scalar_t mx = max_of(x, V);
          const scalar_t z = mx + std::log(exp_sum<scalar_t>(x, scratch.data(), V, mx));
          const scalar_t total = sum_of(x, V);
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

// Rows [from, to) of the logits D [N, V] (without the bias) become their losses L and, in place,
// the losses' gradients for an upstream gradient of 1: softmax - eps / V - (1 - eps) [j == t].
// Rows are independent, so they are split between threads with the same result.
void smoothed_rows(float* D, float* L, const float* B, const int64_t* tgt, int64_t from, int64_t to,
                   int64_t V, float e, int64_t ignore) {
  for (int64_t m = from; m < to; ++m) {
    float* row = D + m * V;
    if (tgt[m] == ignore) {
      std::fill(row, row + V, 0.f);
      continue;
    }
    for (int64_t j = 0; j < V; ++j) row[j] += B[j];
    const float mx = max_of(row, V), total = sum_of(row, V), xt = row[tgt[m]];
    const float sum = exp_sum<float>(row, row, V, mx);  // the row now holds exp(x - mx)
    const float lse = mx + std::log(sum), inv_sum = 1.f / sum, c = e / V;
    L[m] = (1 - e) * (lse - xt) + e * (lse - total / V);
    for (int64_t j = 0; j < V; ++j) row[j] = row[j] * inv_sum - c;
    row[tgt[m]] -= 1 - e;
  }
}

// The output layer and the loss in one node. Forward: one GEMM for the logits, then one pass per
// row (while it is in cache) that adds the bias, computes the row's loss and overwrites it with the
// loss's gradient for an upstream gradient of 1, summing those rows for the bias. Backward: the
// two GEMMs of the linear layer read that gradient, scaled by the upstream gradient through
// GEMM's alpha when it is the same for every row (a mean loss), so neither the logits nor the
// loss's own backward pass are kept or run.
class LinearCrossEntropy : public torch::autograd::Function<LinearCrossEntropy> {
 public:
  // x [N, K] contiguous, w [V, K] (unit column stride), b [V], target [N]: float32.
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w,
                            const at::Tensor& b, const at::Tensor& target, double eps,
                            int64_t ignore) {
    RECORD_FUNCTION("attnkit::linear_cross_entropy", std::vector<c10::IValue>());
    const int64_t N = x.size(0), K = x.size(1), V = w.size(0);
    auto d = at::empty({N, V}, x.options());  // the logits, then dL/dlogits for dL/dloss = 1
    auto colsum = at::empty({V}, x.options());
    auto loss = at::zeros({N}, x.options());
    // Without the bias: it is added row by row below, where each row is read anyway, instead of
    // being copied into every row first for GEMM to read back.
    products::linear(x.data_ptr<float>(), N, K, w.data_ptr<float>(), V, d.data_ptr<float>(),
                     /*accumulate=*/false, w.stride(0));
    const int64_t* tgt = target.data_ptr<int64_t>();
    float *D = d.data_ptr<float>(), *L = loss.data_ptr<float>(), *Cs = colsum.data_ptr<float>();
    const float* B = b.data_ptr<float>();
    const float e = static_cast<float>(eps);
    // The rows' softmax passes ran on one thread beside a threaded GEMM: half of this node's
    // forward time in a GRU training step. Split the rows in blocks of whole rows, ~64 Ki
    // elements each at least.
    const int64_t parts = std::max<int64_t>(1, std::min(row_parts(N), N * V / (1 << 16)));
    for_each_row_part(parts, [&](RowPart part) {
      smoothed_rows(D, L, B, tgt, N * part.first / parts, N * (part.first + 1) / parts, V, e,
                    ignore);
    });
    products::column_sums(D, N, V, V, Cs);  // the bias's gradient for dL/dloss = 1
    ctx->save_for_backward({x, w, d, colsum, target});
    ctx->saved_data["ignore"] = ignore;
    return loss;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &x = saved[0], &w = saved[1], &d = saved[2], &colsum = saved[3], &target = saved[4];
    const int64_t ignore = ctx->saved_data["ignore"].toInt();
    const auto g = grads[0].contiguous();
    const int64_t N = x.size(0);
    const int64_t K = x.size(1), V = w.size(0), ldw = w.stride(0);
    // One upstream gradient for every row that has a loss (ignored rows have a zero gradient
    // whatever theirs is): then it is GEMM's alpha. Otherwise the rows are scaled first.
    const int64_t* tgt = target.data_ptr<int64_t>();
    const float* G = g.data_ptr<float>();
    bool uniform = true, any = false;
    float alpha = 0.f;
    for (int64_t m = 0; m < N; ++m) {
      if (tgt[m] == ignore) continue;
      if (!any) alpha = G[m], any = true;
      uniform = uniform && G[m] == alpha;
    }
    at::Tensor dy = d, db;
    if (uniform) {
      db = colsum * alpha;
    } else {
      dy = d * g.unsqueeze(1);
      db = products::column_sums(dy);
      alpha = 1.f;
    }
    at::Tensor dx, dw;
    if (ctx->needs_input_grad(0)) dx = at::empty_like(x);
    if (ctx->needs_input_grad(1)) dw = at::empty({V, K}, x.options());
    products::linear_backward(dy.data_ptr<float>(), N, K, V, x.data_ptr<float>(),
                              w.data_ptr<float>(), ldw, alpha,
                              dx.defined() ? dx.data_ptr<float>() : nullptr,
                              dw.defined() ? dw.data_ptr<float>() : nullptr);
    return {dx, dw, db, {}, {}, {}};
  }
};

// target [rows] long, every id in [0, V) or ignore_index, smoothing in [0, 1): the target,
// contiguous.
at::Tensor checked_targets(const at::Tensor& target, int64_t rows, int64_t V, double smoothing,
                           int64_t ignore_index, const char* who) {
  TORCH_CHECK(target.dim() == 1 && target.size(0) == rows && target.scalar_type() == at::kLong, who,
              ": target must be [", rows, "] long, got ", target.sizes(), " ",
              target.scalar_type());
  TORCH_CHECK(smoothing >= 0 && smoothing < 1, who, ": smoothing must be in [0, 1), got ",
              smoothing);
  auto t = target.contiguous();
  const auto valid = (t == ignore_index) | ((t >= 0) & (t < V));
  TORCH_CHECK(valid.all().item<bool>(), who, ": a target id is outside [0, V = ", V, ")");
  return t;
}

}  // namespace

at::Tensor label_smoothed_cross_entropy(const at::Tensor& logits, const at::Tensor& target,
                                        double smoothing, int64_t ignore_index) {
  TORCH_CHECK(logits.dim() == 2, "label_smoothed_cross_entropy: logits must be [M, V], got ",
              logits.sizes());
  const auto t = checked_targets(target, logits.size(0), logits.size(1), smoothing, ignore_index,
                                 "label_smoothed_cross_entropy");
  return SmoothedCrossEntropy::apply(logits.contiguous(), t, smoothing, ignore_index);
}

at::Tensor linear_cross_entropy(const at::Tensor& x, const at::Tensor& weight,
                                const at::Tensor& bias, const at::Tensor& target, double smoothing,
                                int64_t ignore_index) {
  TORCH_CHECK(x.dim() == 2 && weight.dim() == 2 && x.size(1) == weight.size(1),
              "linear_cross_entropy: x must be [N, K] and weight [V, K], got ", x.sizes(), " and ",
              weight.sizes());
  TORCH_CHECK(bias.dim() == 1 && bias.size(0) == weight.size(0),
              "linear_cross_entropy: bias must be [V] = [", weight.size(0), "], got ",
              bias.sizes());
  const bool fast = x.scalar_type() == at::kFloat && weight.scalar_type() == at::kFloat &&
                    bias.scalar_type() == at::kFloat && x.device().is_cpu() &&
                    weight.device().is_cpu() && weight.stride(1) == 1 && x.size(0) > 0;
  if (!fast)  // the reference: the layer, then the loss
    return label_smoothed_cross_entropy(at::linear(x, weight, bias), target, smoothing,
                                        ignore_index);
  const auto t = checked_targets(target, x.size(0), weight.size(0), smoothing, ignore_index,
                                 "linear_cross_entropy");
  return LinearCrossEntropy::apply(x.contiguous(), weight, bias.contiguous(), t, smoothing,
                                   ignore_index);
}

}  // namespace attnkit::kernels
