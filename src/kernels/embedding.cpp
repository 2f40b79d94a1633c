#include "attnkit/kernels/embedding.h"

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>

#include "row_parts.h"

namespace attnkit::kernels {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// dW[:, from:to] = sum over positions i (in order, padding skipped) of grad[i, from:to] into row
// ids[i]: one thread's columns.
template <typename T>
void accumulate_columns(const T* grad, const int64_t* ids, int64_t n, int64_t padding_idx, T* dw,
                        int64_t V, int64_t E, int64_t from, int64_t to) {
  for (int64_t v = 0; v < V; ++v) std::fill(dw + v * E + from, dw + v * E + to, T(0));
  for (int64_t i = 0; i < n; ++i) {
    if (ids[i] == padding_idx) continue;
    const T* g = grad + i * E;
    T* row = dw + ids[i] * E;
    for (int64_t j = from; j < to; ++j) row[j] += g[j];
  }
}

class Embedding : public torch::autograd::Function<Embedding> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& weight, const at::Tensor& ids,
                            int64_t padding_idx) {
    ctx->save_for_backward({ids});
    ctx->saved_data["padding_idx"] = padding_idx;
    ctx->saved_data["rows"] = weight.size(0);
    return at::embedding(weight, ids, padding_idx);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto ids = ctx->get_saved_variables()[0];  // long, contiguous, [n]
    const int64_t padding_idx = ctx->saved_data["padding_idx"].toInt();
    const int64_t V = ctx->saved_data["rows"].toInt(), E = grads[0].size(-1), n = ids.numel();
    const auto grad = grads[0].contiguous().view({n, E});
    auto dw = at::empty({V, E}, grad.options());
    AT_DISPATCH_FLOATING_TYPES(grad.scalar_type(), "attnkit_embedding_backward", [&] {
      // Columns per thread: each part zeroes and accumulates (V + n) rows of its columns.
      for_each_range(
          E,
          [&](int64_t from, int64_t to) {
            accumulate_columns<scalar_t>(grad.data_ptr<scalar_t>(), ids.data_ptr<int64_t>(), n,
                                         padding_idx, dw.data_ptr<scalar_t>(), V, E, from, to);
          },
          /*per_index=*/V + n);
    });
    return {dw, at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor embedding(const at::Tensor& weight, const at::Tensor& indices, int64_t padding_idx) {
  const auto type = weight.scalar_type();
  if (!weight.device().is_cpu() || weight.dim() != 2 || (type != at::kFloat && type != at::kDouble))
    return at::embedding(weight, indices, padding_idx);
  const auto ids = indices.to(at::kLong).contiguous();
  const auto flat = ids.view({-1});
  std::vector<int64_t> shape = ids.sizes().vec();
  shape.push_back(weight.size(1));
  return Embedding::apply(weight, flat, padding_idx).view(shape);
}

at::Tensor embed_step(const at::Tensor& weight, const at::Tensor& ids, double scale,
                      const at::Tensor& position) {
  TORCH_CHECK(weight.dim() == 2 && weight.scalar_type() == at::kFloat && ids.dim() == 1 &&
                  position.dim() == 1 && position.size(0) == weight.size(1) &&
                  position.scalar_type() == at::kFloat,
              "embed_step: weight must be float [V, E], ids [N] and position float [E]; got ",
              weight.sizes(), ", ", ids.sizes(), " and ", position.sizes());
  const int64_t V = weight.size(0), E = weight.size(1), N = ids.size(0);
  const auto w = weight.contiguous(), p = position.contiguous();
  const auto id = ids.to(at::kLong).contiguous();
  auto out = at::empty({N, E}, w.options());
  // ATen multiplies a float tensor by a double scalar in float; then a separate add.
  const float s = static_cast<float>(scale);
  const float* pos = p.data_ptr<float>();
  float* o = out.data_ptr<float>();
  for (int64_t n = 0; n < N; ++n) {
    const int64_t t = id.data_ptr<int64_t>()[n];
    TORCH_CHECK(t >= 0 && t < V, "embed_step: token ", t, " is not in the ", V, "-row table");
    const float* row = w.data_ptr<float>() + t * E;
    for (int64_t e = 0; e < E; ++e) {
      const float scaled = row[e] * s;
      o[n * E + e] = scaled + pos[e];
    }
  }
  return out;
}

}  // namespace attnkit::kernels
