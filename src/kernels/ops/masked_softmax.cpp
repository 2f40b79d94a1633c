#include "attnkit/kernels/ops/masked_softmax.h"

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <torch/csrc/autograd/custom_function.h>

#include <cmath>

#include "softmax_row.h"

namespace attnkit::kernels {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

class MaskedSoftmax : public torch::autograd::Function<MaskedSoftmax> {
 public:
  // x [R, Tk] contiguous, keep [R, Tk] bool contiguous.
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& keep) {
    const int64_t R = x.size(0), Tk = x.size(1);
    auto w = at::empty_like(x);
    const bool* K = keep.data_ptr<bool>();
    AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "masked_softmax", [&] {
      const scalar_t* X = x.data_ptr<scalar_t>();
      scalar_t* W = w.data_ptr<scalar_t>();
      for (int64_t r = 0; r < R; ++r)
        masked_softmax_row<scalar_t>(X + r * Tk, K + r * Tk, W + r * Tk, Tk);
    });
    ctx->save_for_backward({w});
    return w;
  }

  // dx_j = w_j (g_j - sum_i w_i g_i); masked positions have w = 0 and get 0.
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto w = ctx->get_saved_variables()[0];
    const auto g = grads[0].contiguous();
    const int64_t R = w.size(0), Tk = w.size(1);
    auto dx = at::empty_like(w);
    AT_DISPATCH_FLOATING_TYPES(w.scalar_type(), "masked_softmax_backward", [&] {
      const scalar_t *W = w.data_ptr<scalar_t>(), *G = g.data_ptr<scalar_t>();
      scalar_t* D = dx.data_ptr<scalar_t>();
      for (int64_t r = 0; r < R; ++r) {
        const scalar_t *wr = W + r * Tk, *gr = G + r * Tk;
        scalar_t dot = 0;
        for (int64_t j = 0; j < Tk; ++j) dot += wr[j] * gr[j];
        for (int64_t j = 0; j < Tk; ++j) D[r * Tk + j] = wr[j] * (gr[j] - dot);
      }
    });
    return {dx, {}};
  }
};

}  // namespace

at::Tensor masked_softmax(const at::Tensor& scores, const at::Tensor& keep) {
  TORCH_CHECK(scores.dim() >= 1 && at::isFloatingType(scores.scalar_type()),
              "masked_softmax: scores must be a floating tensor, got ", scores.scalar_type());
  TORCH_CHECK(!keep.defined() || keep.scalar_type() == at::kBool,
              "masked_softmax: the mask must be bool (true = attend), got ", keep.scalar_type());
  const int64_t Tk = scores.size(-1);
  if (scores.numel() == 0) return at::zeros_like(scores);
  const auto kept = keep.defined() ? keep.expand(scores.sizes()).contiguous()
                                   : at::ones(scores.sizes(), scores.options().dtype(at::kBool));
  auto w = MaskedSoftmax::apply(scores.contiguous().view({-1, Tk}), kept.view({-1, Tk}));
  return w.view(scores.sizes());
}

}  // namespace attnkit::kernels
