#include "attnkit/kernels/ops/layer_norm.h"

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/record_function.h>
#include <torch/csrc/autograd/custom_function.h>

#include <cmath>
#include <vector>

#include "../cpu/row_parts.h"
#include "../cpu/simd.h"
#include "../gemm/products.h"
#include "layer_norm_rows.h"

namespace attnkit::kernels {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

template <typename T>
const T* data_or_null(const at::Tensor& t) {
  return t.defined() ? t.data_ptr<T>() : nullptr;
}

// y, mean, rstd for x [R, D] contiguous.
std::tuple<at::Tensor, at::Tensor, at::Tensor> normalise(const at::Tensor& x, const at::Tensor& w,
                                                         const at::Tensor& b, double eps) {
  const int64_t R = x.size(0), D = x.size(1);
  auto y = at::empty_like(x), mean = at::empty({R}, x.options()),
       rstd = at::empty({R}, x.options());
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "attnkit_layer_norm", [&] {
    for_each_row_block(R, D, [&](int64_t from, int64_t to) {
      layer_norm_rows::forward<scalar_t>(x.data_ptr<scalar_t>(), data_or_null<scalar_t>(w),
                                         data_or_null<scalar_t>(b), y.data_ptr<scalar_t>(),
                                         mean.data_ptr<scalar_t>(), rstd.data_ptr<scalar_t>(), from,
                                         to, D, eps);
    });
  });
  return {y, mean, rstd};
}

class LayerNorm : public torch::autograd::Function<LayerNorm> {
 public:
  // x [R, D] contiguous; w, b [D] contiguous or undefined.
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w,
                            const at::Tensor& b, double eps) {
    RECORD_FUNCTION("attnkit::layer_norm", std::vector<c10::IValue>());
    auto [y, mean, rstd] = normalise(x, w, b, eps);
    ctx->save_for_backward({x, w, mean, rstd});
    ctx->saved_data["bias"] = b.defined();
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return gradients(ctx, grads[0], at::Tensor());
  }

  // dx (+ skip: the gradient x receives past the norm), dw, db and no gradient for eps.
  static variable_list gradients(AutogradContext* ctx, const at::Tensor& grad,
                                 const at::Tensor& skip) {
    const auto saved = ctx->get_saved_variables();
    const auto &x = saved[0], &w = saved[1], &mean = saved[2], &rstd = saved[3];
    const auto dy = grad.contiguous();
    const auto dskip = skip.defined() ? skip.contiguous() : skip;
    const int64_t R = x.size(0), D = x.size(1);
    auto dx = at::empty_like(x);
    const bool weight_grad = w.defined() && ctx->needs_input_grad(1);
    auto scaled = weight_grad ? at::empty_like(x) : at::Tensor();  // dy * xhat
    AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "attnkit_layer_norm_backward", [&] {
      for_each_row_block(R, D, [&](int64_t from, int64_t to) {
        layer_norm_rows::backward<scalar_t>(x.data_ptr<scalar_t>(), data_or_null<scalar_t>(w),
                                            dy.data_ptr<scalar_t>(), mean.data_ptr<scalar_t>(),
                                            rstd.data_ptr<scalar_t>(), dx.data_ptr<scalar_t>(),
                                            weight_grad ? scaled.data_ptr<scalar_t>() : nullptr,
                                            from, to, D, data_or_null<scalar_t>(dskip));
      });
    });
    at::Tensor dw, db;
    if (weight_grad) dw = products::column_sums(scaled);
    if (ctx->saved_data["bias"].toBool() && ctx->needs_input_grad(2))
      db = products::column_sums(dy);
    return {dx, dw, db, {}};
  }
};

// The residual stream at a pre-norm sublayer: x goes on unchanged (output 0, x itself, which
// LibTorch hands out as a view with this node as its source) and into the sublayer normalised
// (output 1). Both gradients reach one node, which adds the stream's to the norm's dx in the
// rows' own pass on the kernels' threads; with the two as separate nodes, LibTorch's engine adds
// them, on one thread.
class LayerNormBranch : public torch::autograd::Function<LayerNormBranch> {
 public:
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w,
                               const at::Tensor& b, double eps) {
    return {x, LayerNorm::forward(ctx, x, w, b, eps)};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto &skip = grads[0], &dy = grads[1];
    if (!dy.defined()) return {skip, {}, {}, {}};
    return LayerNorm::gradients(ctx, dy, skip);
  }
};

bool cpu_floating(const at::Tensor& t, at::ScalarType type) {
  return t.device().is_cpu() && t.scalar_type() == type;
}

}  // namespace

at::Tensor layer_norm(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                      double eps) {
  TORCH_CHECK(x.dim() >= 1, "layer_norm: x must have a last dimension, got ", x.sizes());
  const int64_t D = x.size(-1);
  for (const auto* t : {&weight, &bias})
    TORCH_CHECK(!t->defined() || (t->dim() == 1 && t->size(0) == D), "layer_norm: weight and bias ",
                "must be [", D, "], got ", t->sizes());
  const auto type = x.scalar_type();
  const bool fast = x.device().is_cpu() && (type == at::kFloat || type == at::kDouble) &&
                    weight.defined() && bias.defined() && cpu_floating(weight, type) &&
                    cpu_floating(bias, type) && x.numel() > 0;
  if (!fast) return at::layer_norm(x, {D}, weight, bias, eps);
  const auto rows = x.contiguous().view({-1, D});
  const auto w = weight.contiguous(), b = bias.contiguous();
  const bool needs_grad =
      at::GradMode::is_enabled() && (x.requires_grad() || w.requires_grad() || b.requires_grad());
  if (!needs_grad) return std::get<0>(normalise(rows, w, b, eps)).view(x.sizes());
  return LayerNorm::apply(rows, w, b, eps).view(x.sizes());
}

std::pair<at::Tensor, at::Tensor> layer_norm_branch(const at::Tensor& x, const at::Tensor& weight,
                                                    const at::Tensor& bias, double eps) {
  const bool fast = x.dim() >= 1 && x.is_contiguous() && weight.defined() && bias.defined() &&
                    x.device().is_cpu() &&
                    (x.scalar_type() == at::kFloat || x.scalar_type() == at::kDouble) &&
                    cpu_floating(weight, x.scalar_type()) && cpu_floating(bias, x.scalar_type()) &&
                    weight.is_contiguous() && bias.is_contiguous() && x.numel() > 0 &&
                    at::GradMode::is_enabled() &&
                    (x.requires_grad() || weight.requires_grad() || bias.requires_grad());
  if (!fast) return {x, layer_norm(x, weight, bias, eps)};
  const int64_t D = x.size(-1);
  TORCH_CHECK(weight.dim() == 1 && weight.size(0) == D && bias.dim() == 1 && bias.size(0) == D,
              "layer_norm: weight and bias must be [", D, "], got ", weight.sizes(), " and ",
              bias.sizes());
  auto out = LayerNormBranch::apply(x.view({-1, D}), weight, bias, eps);
  return {out[0].view(x.sizes()), out[1].view(x.sizes())};
}

}  // namespace attnkit::kernels
