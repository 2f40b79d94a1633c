#include "attnkit/kernels/ops/column_split.h"

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>

#include "../cpu/row_parts.h"

namespace attnkit::kernels {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// grad[r, from_col : from_col + g.size(1)] = g[r] for rows [from, to), or zeros for an undefined g.
template <typename T>
void put_block(T* grad, int64_t C, int64_t from_col, const at::Tensor& g, int64_t width,
               int64_t from, int64_t to) {
  const T* src = g.defined() ? g.data_ptr<T>() : nullptr;
  for (int64_t r = from; r < to; ++r) {
    T* row = grad + r * C + from_col;
    if (src)
      std::copy(src + r * width, src + (r + 1) * width, row);
    else
      std::fill(row, row + width, T(0));
  }
}

class SplitColumns : public torch::autograd::Function<SplitColumns> {
 public:
  static variable_list forward(AutogradContext* ctx, const at::Tensor& w, int64_t at) {
    ctx->saved_data["at"] = at;
    ctx->saved_data["columns"] = w.size(1);
    return {w.narrow(1, 0, at), w.narrow(1, at, w.size(1) - at)};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const int64_t at = ctx->saved_data["at"].toInt(), C = ctx->saved_data["columns"].toInt();
    const auto left = grads[0].defined() ? grads[0].contiguous() : at::Tensor();
    const auto right = grads[1].defined() ? grads[1].contiguous() : at::Tensor();
    const auto& any = left.defined() ? left : right;
    if (!any.defined()) return {at::Tensor(), at::Tensor()};
    const int64_t R = any.size(0);
    auto grad = at::empty({R, C}, any.options());
    AT_DISPATCH_FLOATING_TYPES(any.scalar_type(), "attnkit_split_columns_backward", [&] {
      for_each_row_block(R, C, [&](int64_t from, int64_t to) {
        scalar_t* g = grad.data_ptr<scalar_t>();
        put_block<scalar_t>(g, C, 0, left, at, from, to);
        put_block<scalar_t>(g, C, at, right, C - at, from, to);
      });
    });
    return {grad, at::Tensor()};
  }
};

}  // namespace

std::pair<at::Tensor, at::Tensor> split_columns(const at::Tensor& w, int64_t at) {
  TORCH_CHECK(w.dim() == 2 && at > 0 && at < w.size(1), "split_columns: w must be [R, C] with ",
              "0 < at < C, got ", w.sizes(), " and at = ", at);
  const auto type = w.scalar_type();
  if (!w.device().is_cpu() || (type != at::kFloat && type != at::kDouble))
    return {w.narrow(1, 0, at), w.narrow(1, at, w.size(1) - at)};
  auto out = SplitColumns::apply(w, at);
  return {out[0], out[1]};
}

}  // namespace attnkit::kernels
