#include "attnkit/kernels/ops/context.h"

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <torch/csrc/autograd/custom_function.h>

namespace attnkit::kernels {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

class Context : public torch::autograd::Function<Context> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& w, const at::Tensor& v) {
    const int64_t N = w.size(0), Tq = w.size(1), Tk = w.size(2), D = v.size(2);
    auto out = at::zeros({N, Tq, D}, v.options());
    AT_DISPATCH_FLOATING_TYPES(v.scalar_type(), "attention_context", [&] {
      const scalar_t *W = w.data_ptr<scalar_t>(), *Vv = v.data_ptr<scalar_t>();
      scalar_t* O = out.data_ptr<scalar_t>();
      at::parallel_for(0, N, 4, [&](int64_t begin, int64_t end) {
        for (int64_t n = begin; n < end; ++n)
          for (int64_t i = 0; i < Tq; ++i) {
            scalar_t* o = O + (n * Tq + i) * D;
            for (int64_t j = 0; j < Tk; ++j) {
              const scalar_t a = W[(n * Tq + i) * Tk + j];
              if (a == 0) continue;  // masked keys
              const scalar_t* row = Vv + (n * Tk + j) * D;
              for (int64_t d = 0; d < D; ++d) o[d] += a * row[d];
            }
          }
      });
    });
    ctx->save_for_backward({w, v});
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const auto &w = saved[0], &v = saved[1];
    const auto g = grads[0].contiguous();
    const int64_t N = w.size(0), Tq = w.size(1), Tk = w.size(2), D = v.size(2);
    // With one query per row (decoder steps), every dv row is written exactly once below, so it
    // needs no zero fill first: that fill was a [N, S, D] pass per step.
    auto dw = at::empty_like(w), dv = Tq == 1 ? at::empty_like(v) : at::zeros_like(v);
    AT_DISPATCH_FLOATING_TYPES(v.scalar_type(), "attention_context_backward", [&] {
      const scalar_t *W = w.data_ptr<scalar_t>(), *Vv = v.data_ptr<scalar_t>(),
                     *G = g.data_ptr<scalar_t>();
      scalar_t *dW = dw.data_ptr<scalar_t>(), *dV = dv.data_ptr<scalar_t>();
      at::parallel_for(0, N, 4, [&](int64_t begin, int64_t end) {
        for (int64_t n = begin; n < end; ++n)
          for (int64_t i = 0; i < Tq; ++i) {
            const scalar_t* gi = G + (n * Tq + i) * D;
            for (int64_t j = 0; j < Tk; ++j) {
              const scalar_t* row = Vv + (n * Tk + j) * D;
              scalar_t* drow = dV + (n * Tk + j) * D;
              const scalar_t a = W[(n * Tq + i) * Tk + j];
              scalar_t dot = 0;
              if (Tq == 1) {
                for (int64_t d = 0; d < D; ++d) {
                  dot += gi[d] * row[d];
                  drow[d] = a * gi[d];
                }
              } else {
                for (int64_t d = 0; d < D; ++d) {
                  dot += gi[d] * row[d];
                  drow[d] += a * gi[d];
                }
              }
              dW[(n * Tq + i) * Tk + j] = dot;
            }
          }
      });
    });
    return {dw, dv};
  }
};

}  // namespace

at::Tensor attention_context(const at::Tensor& weights, const at::Tensor& values) {
  TORCH_CHECK(weights.dim() == 3 && values.dim() == 3 && weights.size(0) == values.size(0) &&
                  weights.size(2) == values.size(1),
              "attention_context: weights must be [N, Tq, Tk] and values [N, Tk, D], got ",
              weights.sizes(), " and ", values.sizes());
  TORCH_CHECK(weights.scalar_type() == values.scalar_type(),
              "attention_context: weights and values must share one floating type");
  return Context::apply(weights.contiguous(), values.contiguous());
}

}  // namespace attnkit::kernels
