#include "attnkit/kernels/ops/linear.h"

#include <ATen/ATen.h>
#include <ATen/record_function.h>
#include <torch/csrc/autograd/custom_function.h>

#include "../gemm/products.h"

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
    if (ctx->saved_data["bias"].toBool() && ctx->needs_input_grad(2))
      db = at::empty({out}, x.options());
    auto ptr = [](at::Tensor& t) { return t.defined() ? t.data_ptr<float>() : nullptr; };
    products::linear_backward(dy.data_ptr<float>(), rows, in, out, x.data_ptr<float>(),
                              w.data_ptr<float>(), ldw, 1.f, ptr(dx), ptr(dw), ptr(db));
    return {dx, dw, db};
  }
};

// y1 = x1 W[0, r)^T + b[0, r) and y2 = x2 W[r, out)^T + b[r, out), for training: dW and db are
// written block by block into one tensor each.
class AffineBlocks : public torch::autograd::Function<AffineBlocks> {
 public:
  // x1 [rows1, in], x2 [rows2, in] contiguous, w [out, in] contiguous, b [out] or empty.
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x1, const at::Tensor& x2,
                               const at::Tensor& w, const at::Tensor& b, int64_t r) {
    RECORD_FUNCTION("attnkit::linear_blocks", std::vector<c10::IValue>());
    const int64_t in = w.size(1), out = w.size(0);
    const float* bias = b.numel() > 0 ? b.data_ptr<float>() : nullptr;
    auto y1 = at::empty({x1.size(0), r}, x1.options()),
         y2 = at::empty({x2.size(0), out - r}, x2.options());
    products::affine(x1.data_ptr<float>(), x1.size(0), in, w.data_ptr<float>(), r, bias,
                     y1.data_ptr<float>());
    products::affine(x2.data_ptr<float>(), x2.size(0), in, w.data_ptr<float>() + r * in, out - r,
                     bias ? bias + r : nullptr, y2.data_ptr<float>());
    ctx->save_for_backward({x1, x2, w});
    ctx->saved_data["bias"] = b.numel() > 0;
    ctx->saved_data["rows"] = r;
    return {y1, y2};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &x1 = saved[0], &x2 = saved[1], &w = saved[2];
    const int64_t r = ctx->saved_data["rows"].toInt(), in = w.size(1), out = w.size(0);
    const bool weight_grad = ctx->needs_input_grad(2),
               bias_grad = ctx->saved_data["bias"].toBool() && ctx->needs_input_grad(3);
    at::Tensor dx[2], dw = weight_grad ? at::empty({out, in}, w.options()) : at::Tensor(),
                      db = bias_grad ? at::empty({out}, w.options()) : at::Tensor();
    for (int i = 0; i < 2; ++i) {  // block i: weight rows [first, first + count)
      const auto& x = i == 0 ? x1 : x2;
      const int64_t first = i == 0 ? 0 : r, count = i == 0 ? r : out - r;
      if (!grads[i].defined()) {  // this output unused: its blocks get zeros
        if (weight_grad) dw.narrow(0, first, count).zero_();
        if (bias_grad) db.narrow(0, first, count).zero_();
        continue;
      }
      const auto dy = grads[i].contiguous();  // [rows_i, count]
      if (ctx->needs_input_grad(i)) dx[i] = at::empty_like(x);
      products::linear_backward(dy.data_ptr<float>(), x.size(0), in, count, x.data_ptr<float>(),
                                w.data_ptr<float>() + first * in, in, 1.f,
                                dx[i].defined() ? dx[i].data_ptr<float>() : nullptr,
                                weight_grad ? dw.data_ptr<float>() + first * in : nullptr,
                                bias_grad ? db.data_ptr<float>() + first : nullptr);
    }
    return {dx[0], dx[1], dw, db, {}};
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

std::pair<at::Tensor, at::Tensor> linear_blocks(const at::Tensor& x1, const at::Tensor& x2,
                                                const at::Tensor& weight, const at::Tensor& bias,
                                                int64_t rows) {
  TORCH_CHECK(weight.dim() == 2 && rows >= 0 && rows <= weight.size(0),
              "linear_blocks: weight must be [out, in] with 0 <= rows <= out, got ", weight.sizes(),
              " and rows ", rows);
  auto block = [&](const at::Tensor& t, int64_t first, int64_t count) {
    return t.defined() ? t.narrow(0, first, count) : at::Tensor();
  };
  const int64_t in = weight.size(1), out = weight.size(0);
  const bool needs_grad = at::GradMode::is_enabled() &&
                          (x1.requires_grad() || x2.requires_grad() || weight.requires_grad() ||
                           (bias.defined() && bias.requires_grad()));
  const bool supported =
      needs_grad && float_cpu(x1) && float_cpu(x2) && float_cpu(weight) && weight.is_contiguous() &&
      x1.size(-1) == in && x2.size(-1) == in && x1.numel() > 0 && x2.numel() > 0 &&
      (!bias.defined() || (float_cpu(bias) && bias.dim() == 1 && bias.size(0) == out));
  if (!supported)
    return {linear(x1, block(weight, 0, rows), block(bias, 0, rows)),
            linear(x2, block(weight, rows, out - rows), block(bias, rows, out - rows))};
  auto sizes = [](const at::Tensor& x, int64_t n) {
    auto s = x.sizes().vec();
    s.back() = n;
    return s;
  };
  const auto b = bias.defined() ? bias.contiguous() : at::empty({0}, x1.options());
  const auto y = AffineBlocks::apply(x1.contiguous().view({-1, in}), x2.contiguous().view({-1, in}),
                                     weight, b, rows);
  return {y[0].view(sizes(x1, rows)), y[1].view(sizes(x2, out - rows))};
}

}  // namespace attnkit::kernels
