#include "attnkit/kernels/ops/embedding.h"

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>

#include "../cpu/row_parts.h"

namespace attnkit::kernels {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// dW[:, from:to] = sum over positions i (in order, padding skipped) of grad[i, from:to] (times
// `scale`, rounded before the sum, as a separate multiplication's gradient would be) into row
// ids[i]: one thread's columns.
template <typename T, bool Scaled = false>
void accumulate_columns(const T* grad, const int64_t* ids, int64_t n, int64_t padding_idx, T* dw,
                        int64_t V, int64_t E, int64_t from, int64_t to, T scale = 1) {
  for (int64_t v = 0; v < V; ++v) std::fill(dw + v * E + from, dw + v * E + to, T(0));
  for (int64_t i = 0; i < n; ++i) {
    if (ids[i] == padding_idx) continue;
    const T* g = grad + i * E;
    T* row = dw + ids[i] * E;
    for (int64_t j = from; j < to; ++j) row[j] += Scaled ? T(g[j] * scale) : g[j];
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

// out[b, t] = weight[ids[b, t]] * scale + positions[t] in float, rows split between the threads;
// the gradient reaches the weight only, each position's row times scale.
class ScaledEmbedding : public torch::autograd::Function<ScaledEmbedding> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& weight, const at::Tensor& ids,
                            double scale, const at::Tensor& positions, int64_t padding_idx) {
    ctx->save_for_backward({ids});
    ctx->saved_data["padding_idx"] = padding_idx;
    ctx->saved_data["rows"] = weight.size(0);
    ctx->saved_data["scale"] = scale;
    const int64_t V = weight.size(0), E = weight.size(1), B = ids.size(0), T = ids.size(1);
    const int64_t* id = ids.data_ptr<int64_t>();
    for (int64_t i = 0; i < B * T; ++i)
      TORCH_CHECK(id[i] >= 0 && id[i] < V, "embed: token ", id[i], " is not in the ", V,
                  "-row table");
    auto out = at::empty({B, T, E}, weight.options());
    const float s = static_cast<float>(scale);  // ATen multiplies a float tensor so, in float
    const float *w = weight.data_ptr<float>(), *pos = positions.data_ptr<float>();
    float* o = out.data_ptr<float>();
    for_each_row_block(B * T, /*per_row=*/E, [&](int64_t from, int64_t to) {
      for (int64_t i = from; i < to; ++i) {
        const float *row = w + id[i] * E, *p = pos + (i % T) * E;
        for (int64_t e = 0; e < E; ++e) {
          const float scaled = row[e] * s;
          o[i * E + e] = scaled + p[e];
        }
      }
    });
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto ids = ctx->get_saved_variables()[0];  // long, contiguous, [B, T]
    const int64_t padding_idx = ctx->saved_data["padding_idx"].toInt();
    const auto scale = static_cast<float>(ctx->saved_data["scale"].toDouble());
    const int64_t V = ctx->saved_data["rows"].toInt(), E = grads[0].size(-1), n = ids.numel();
    const auto grad = grads[0].contiguous().view({n, E});
    auto dw = at::empty({V, E}, grad.options());
    for_each_range(
        E,
        [&](int64_t from, int64_t to) {
          accumulate_columns<float, /*Scaled=*/true>(grad.data_ptr<float>(),
                                                     ids.data_ptr<int64_t>(), n, padding_idx,
                                                     dw.data_ptr<float>(), V, E, from, to, scale);
        },
        /*per_index=*/V + n);
    return {dw, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor embed(const at::Tensor& weight, const at::Tensor& tokens, double scale,
                 const at::Tensor& positions, int64_t padding_idx) {
  TORCH_CHECK(weight.dim() == 2 && tokens.dim() == 2 && positions.dim() == 2 &&
                  positions.size(0) == tokens.size(1) && positions.size(1) == weight.size(1),
              "embed: weight must be [V, E], tokens [B, T] and positions [T, E]; got ",
              weight.sizes(), ", ", tokens.sizes(), " and ", positions.sizes());
  if (!weight.device().is_cpu() || weight.scalar_type() != at::kFloat ||
      positions.scalar_type() != at::kFloat || positions.requires_grad())
    return kernels::embedding(weight, tokens, padding_idx) * scale + positions;
  return ScaledEmbedding::apply(weight.contiguous(), tokens.to(at::kLong).contiguous(), scale,
                                positions.contiguous(), padding_idx);
}

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
