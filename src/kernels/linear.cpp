#include "attnkit/kernels/linear.h"

#include <ATen/ATen.h>
#include <ATen/record_function.h>
#include <torch/csrc/autograd/custom_function.h>

#include "products.h"

namespace attnkit::kernels {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// y = x W^T + b on float32 rows, for training. at::linear's addmm first copies the bias into every
// output row through a broadcasting TensorIterator copy: for the output layer ([N, 2782]) that
// copy alone took 1.8 ms of a training step. Here each row starts as a memcpy of the bias and
// GEMM accumulates onto it.
class Affine : public torch::autograd::Function<Affine> {
 public:
  // x [rows, in] contiguous, w [out, in] with unit column stride (rows ldw apart), b [out] or
  // empty.
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w,
                            const at::Tensor& b) {
    RECORD_FUNCTION("attnkit::linear", std::vector<c10::IValue>());
    const int64_t rows = x.size(0), in = x.size(1), out = w.size(0);
    auto y = at::empty({rows, out}, x.options());
    products::affine(x.data_ptr<float>(), rows, in, w.data_ptr<float>(), out,
                     b.numel() > 0 ? b.data_ptr<float>() : nullptr, y.data_ptr<float>(),
                     w.stride(0));
    ctx->save_for_backward({x, w});
    ctx->saved_data["bias"] = b.numel() > 0;
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &x = saved[0], &w = saved[1];
    const auto dy = grads[0].contiguous();  // [rows, out]
    const int64_t rows = x.size(0), in = x.size(1), out = w.size(0), ldw = w.stride(0);
    at::Tensor dx, dw, db;
    if (ctx->needs_input_grad(0)) dx = at::empty_like(x);
    if (ctx->needs_input_grad(1)) dw = at::empty({out, in}, x.options());
    products::linear_backward(dy.data_ptr<float>(), rows, in, out, x.data_ptr<float>(),
                              w.data_ptr<float>(), ldw, 1.f,
                              dx.defined() ? dx.data_ptr<float>() : nullptr,
                              dw.defined() ? dw.data_ptr<float>() : nullptr);
    if (ctx->saved_data["bias"].toBool() && ctx->needs_input_grad(2))
      db = products::column_sums(dy);
    return {dx, dw, db};
  }
};

bool float_cpu(const at::Tensor& t) { return t.scalar_type() == at::kFloat && t.device().is_cpu(); }

}  // namespace

at::Tensor linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  const int64_t in = x.size(-1), rows = in > 0 ? x.numel() / in : 0;
  const bool needs_grad =
      at::GradMode::is_enabled() &&
      (x.requires_grad() || weight.requires_grad() || (bias.defined() && bias.requires_grad()));
  const bool supported =
      rows > 0 && float_cpu(x) && float_cpu(weight) && weight.dim() == 2 && weight.size(1) == in &&
      weight.stride(1) == 1 &&
      (!bias.defined() || (float_cpu(bias) && bias.dim() == 1 && bias.size(0) == weight.size(0)));
  if (!supported) return at::linear(x, weight, bias);
  const int64_t out = weight.size(0);
  auto sizes = x.sizes().vec();
  sizes.back() = out;
  const auto b = bias.defined() ? bias.contiguous() : at::empty({0}, x.options());
  if (needs_grad) return Affine::apply(x.contiguous().view({rows, in}), weight, b).view(sizes);
  const auto xc = x.contiguous();
  auto y = at::empty(sizes, x.options());
  products::affine(xc.data_ptr<float>(), rows, in, weight.data_ptr<float>(), out,
                   b.numel() > 0 ? b.data_ptr<float>() : nullptr, y.data_ptr<float>(),
                   weight.stride(0));
  return y;
}

}  // namespace attnkit::kernels
