#include "attnkit/attention/self_attention.h"

#include <ATen/ATen.h>
#include <torch/nn/init.h>
#include <torch/nn/options/linear.h>

#include <tuple>

#include "attnkit/attention/functional.h"
#include "attnkit/attention/mask.h"
#include "attnkit/kernels/ops/fused_attention.h"
#include "attnkit/kernels/ops/linear.h"

namespace attnkit {

using torch::nn::Linear;
using torch::nn::LinearOptions;

SelfAttentionImpl::SelfAttentionImpl(SelfAttentionOptions options_)
    : options(options_),
      w_q(LinearOptions(options.embed_dim(), options.embed_dim()).bias(options.bias())),
      w_k(LinearOptions(options.embed_dim(), options.embed_dim()).bias(options.bias())),
      w_v(LinearOptions(options.embed_dim(), options.embed_dim()).bias(options.bias())) {
  register_module("w_q", w_q);
  register_module("w_k", w_k);
  register_module("w_v", w_v);
}

AttentionOutput SelfAttentionImpl::forward(const at::Tensor& x, const at::Tensor& mask) {
  TORCH_CHECK(x.dim() == 3 && x.size(2) == options.embed_dim(), "SelfAttention: X must be [B, T, ",
              options.embed_dim(), "] but has shape ", x.sizes());
  auto keep = check_mask(mask, x.size(0), x.size(1), x.size(1), "SelfAttention");
  auto [output, weights] =
      functional::scaled_dot_product_attention(w_q(x), w_k(x), w_v(x), keep);  // [B, T, E]
  return {output, weights};
}

MultiheadAttentionImpl::MultiheadAttentionImpl(MultiheadAttentionOptions options_)
    : options(options_),
      out_proj(LinearOptions(options.embed_dim(), options.embed_dim()).bias(options.bias())) {
  const int64_t e = options.embed_dim(), h = options.num_heads();
  TORCH_CHECK(e > 0 && h > 0 && e % h == 0, "MultiheadAttention: embed_dim (", e,
              ") must be a positive multiple of num_heads (", h, ")");
  in_proj_weight = register_parameter("in_proj_weight", at::empty({3 * e, e}));
  if (options.bias()) in_proj_bias = register_parameter("in_proj_bias", at::empty({3 * e}));
  register_module("out_proj", out_proj);
  reset_parameters();
}

void MultiheadAttentionImpl::reset_parameters() {
  torch::NoGradGuard no_grad;
  torch::nn::init::xavier_uniform_(in_proj_weight);
  if (in_proj_bias.defined()) in_proj_bias.zero_();
  if (out_proj->options.bias()) out_proj->bias.zero_();
}

PackedProjections MultiheadAttentionImpl::pack(kernels::ComputeType type) {
  return {kernels::PackedLinear(in_proj_weight, in_proj_bias, type),
          kernels::PackedLinear(out_proj->weight, out_proj->bias, type)};
}

// Rows [0, E) of the in-projection make the queries, rows [E, 3E) the keys and values.
namespace {
at::Tensor weight_rows(const at::Tensor& t, int64_t first, int64_t count) {
  return t.defined() ? t.narrow(0, first, count) : at::Tensor();
}
}  // namespace

at::Tensor MultiheadAttentionImpl::project_queries(const at::Tensor& x) {
  const int64_t e = options.embed_dim();
  return kernels::linear(x, weight_rows(in_proj_weight, 0, e), weight_rows(in_proj_bias, 0, e));
}

at::Tensor MultiheadAttentionImpl::project_keys_values(const at::Tensor& x) {
  const int64_t e = options.embed_dim();
  return kernels::linear(x, weight_rows(in_proj_weight, e, 2 * e),
                         weight_rows(in_proj_bias, e, 2 * e));
}

std::pair<at::Tensor, at::Tensor> MultiheadAttentionImpl::project_cross(const at::Tensor& query,
                                                                        const at::Tensor& key) {
  return kernels::linear_blocks(query, key, in_proj_weight, in_proj_bias, options.embed_dim());
}

MultiheadOutput MultiheadAttentionImpl::forward(const at::Tensor& query, const at::Tensor& key,
                                                const at::Tensor& value, const at::Tensor& mask,
                                                bool need_weights,
                                                const PackedProjections* packed) {
  TORCH_CHECK(!packed || !at::GradMode::is_enabled(),
              "MultiheadAttention: packed projections are for inference (no gradients)");
  functional::check_qkv(query, key, value, "MultiheadAttention");
  const int64_t e = options.embed_dim(), heads = options.num_heads(), head_dim = e / heads;
  TORCH_CHECK(query.size(2) == e && key.size(2) == e && value.size(2) == e,
              "MultiheadAttention: built for embed_dim ", e, " but got Q ", query.sizes(), ", K ",
              key.sizes(), ", V ", value.sizes());
  const int64_t batch = query.size(0), tq = query.size(1), tk = key.size(1);
  const auto mask3 = check_mask(mask, batch, tq, tk, "MultiheadAttention");  // [B|1, Tq|1, Tk]

  const double dropout = is_training() ? options.dropout() : 0.0;
  const bool fused =
      !need_weights && dropout == 0 && query.scalar_type() == at::kFloat && query.device().is_cpu();
  auto out_proj_of = [&](const at::Tensor& merged) {  // [B, Tq, E]
    return packed ? packed->out_proj(merged)
                  : kernels::linear(merged, out_proj->weight, out_proj->bias);
  };
  const bool self = query.is_same(key) && key.is_same(value);
  if (fused && key.is_same(value)) {
    // The fused kernel on the projections as they come out of their products (keys and values
    // of a cross-attention in one product): no [Tq, Tk] weights kept for the backward pass, and
    // no head split or merged in memory.
    if (self) {
      auto qkv = packed ? packed->in_proj(query)
                        : kernels::linear(query, in_proj_weight, in_proj_bias);  // [B, T, 3E]
      return {out_proj_of(kernels::fused_multihead_attention(qkv, {}, heads, mask3)), {}};
    }
    const auto [q, kv] = packed ? std::pair{project_queries(query), project_keys_values(key)}
                                : project_cross(query, key);  // [B, Tq, E], [B, Tk, 2E]
    return {out_proj_of(kernels::fused_multihead_attention(q, kv, heads, mask3)), {}};
  }

  at::Tensor q, k, v;  // each [B, H, T, E/H]
  if (self) {
    auto qkv = (packed ? packed->in_proj(query)
                       : kernels::linear(query, in_proj_weight, in_proj_bias))  // [B, T, 3E]
                   .view({batch, tq, 3, heads, head_dim})
                   .permute({2, 0, 3, 1, 4});  // [3, B, H, T, d]
    q = qkv[0];
    k = qkv[1];
    v = qkv[2];
  } else {
    auto w = in_proj_weight.chunk(3);
    std::vector<at::Tensor> b(3);
    if (in_proj_bias.defined()) b = in_proj_bias.chunk(3);
    auto split_heads = [&](const at::Tensor& x, int i) {  // [B, T, E] -> [B, H, T, E/H]
      return kernels::linear(x, w[i], b[i])
          .view({batch, x.size(1), heads, head_dim})
          .transpose(1, 2);
    };
    q = split_heads(query, 0);
    k = split_heads(key, 1);
    v = split_heads(value, 2);
  }
  // [B|1, 1, Tq|1, Tk]: shared by heads
  const auto keep = mask3.defined() ? mask3.unsqueeze(1) : mask3;
  at::Tensor heads_out, weights;  // [B, H, Tq, d], [B, H, Tq, Tk]
  if (fused) {
    // Keys and values from different inputs: the fused kernel over the B x H rows.
    auto rows = [&](const at::Tensor& x) {
      return x.reshape({batch * heads, x.size(2), head_dim});
    };
    at::Tensor row_mask;
    if (keep.defined())  // [B|1, 1, Tq|1, Tk] -> [B x H | 1, Tq|1, Tk]
      row_mask = keep.size(0) == 1 ? keep[0]
                                   : keep.expand({batch, heads, keep.size(2), tk})
                                         .reshape({batch * heads, keep.size(2), tk});
    heads_out = kernels::fused_attention(rows(q), rows(k), rows(v), row_mask)
                    .view({batch, heads, tq, head_dim});
  } else {
    std::tie(heads_out, weights) = functional::scaled_dot_product_attention(q, k, v, keep, dropout);
  }
  auto merged = heads_out.transpose(1, 2).reshape({batch, tq, e});  // [B, Tq, E]
  return {out_proj_of(merged), weights};
}

at::Tensor MultiheadAttentionImpl::forward_ragged(const at::Tensor& query,
                                                  const kernels::Ragged& ragged,
                                                  const at::Tensor& key_value,
                                                  const at::Tensor& mask) {
  const int64_t e = options.embed_dim(), heads = options.num_heads();
  const int64_t batch = static_cast<int64_t>(ragged.lengths.size()), tq = ragged.length;
  TORCH_CHECK(query.dim() == 2 && query.size(0) == ragged.rows() && query.size(1) == e,
              "MultiheadAttention: ragged query must be [", ragged.rows(), ", ", e,
              "] but has shape ", query.sizes());
  const bool self = !key_value.defined();
  const bool fused = !(is_training() && options.dropout() > 0) &&
                     query.scalar_type() == at::kFloat && query.device().is_cpu();
  if (!fused) {  // the padded path, then its real rows
    const auto padded = kernels::pad(query, ragged);
    const auto& kv = self ? padded : key_value;
    return kernels::unpad(forward(padded, kv, kv, mask, /*need_weights=*/false).output, ragged);
  }
  const int64_t tk = self ? tq : key_value.size(1);
  TORCH_CHECK(
      self || (key_value.dim() == 3 && key_value.size(0) == batch && key_value.size(2) == e),
      "MultiheadAttention: key/value must be [", batch, ", Tk, ", e, "] but has shape ",
      key_value.sizes());
  const auto mask3 = check_mask(mask, batch, tq, tk, "MultiheadAttention");
  at::Tensor heads_out;  // [B, Tq, E]
  if (self) {
    const auto qkv = kernels::linear(query, in_proj_weight, in_proj_bias);  // [R, 3E]
    heads_out = kernels::fused_multihead_attention(kernels::pad(qkv, ragged), {}, heads, mask3);
  } else {
    const auto [q, kv] = project_cross(query, key_value);
    heads_out = kernels::fused_multihead_attention(kernels::pad(q, ragged), kv, heads, mask3);
  }
  return kernels::linear(kernels::unpad(heads_out, ragged), out_proj->weight, out_proj->bias);
}

}  // namespace attnkit
