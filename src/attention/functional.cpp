#include "attnkit/attention/functional.h"

#include <ATen/ATen.h>

#include <cmath>
#include <limits>

#include "attnkit/kernels/ops/dropout.h"
#include "attnkit/kernels/ops/linear.h"
#include "attnkit/kernels/ops/masked_softmax.h"

namespace attnkit::functional {
namespace {

void check_rank3(const at::Tensor& t, const char* name, const char* layout, const char* where) {
  TORCH_CHECK(t.defined(), where, ": ", name, " is undefined");
  TORCH_CHECK(t.dim() == 3, where, ": ", name, " must be ", layout, " but has shape ", t.sizes());
}

void check_qk(const at::Tensor& q, const at::Tensor& k, const char* where) {
  check_rank3(q, "Q", "[B, Tq, Dq]", where);
  check_rank3(k, "K", "[B, Tk, Dk]", where);
  TORCH_CHECK(q.size(0) == k.size(0), where, ": Q ", q.sizes(), " and K ", k.sizes(),
              " have different batch sizes (dim 0)");
}

void check_same_width(const at::Tensor& q, const at::Tensor& k, const char* where) {
  TORCH_CHECK(q.size(-1) == k.size(-1), where, ": Q ", q.sizes(), " and K ", k.sizes(),
              " must have the same last dimension for a dot product");
}

// A finite stand-in for -inf: softmax of a row whose every entry is masked stays finite
// (uniform), and the masked_fill that follows turns it into exact zeros, with no NaN in the
// forward or the backward pass.
at::Scalar lowest(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kDouble:
      return std::numeric_limits<double>::lowest();
    case at::kHalf:
      return -65504.0;
    default:
      return std::numeric_limits<float>::lowest();
  }
}

at::Tensor check_linear_weight(const at::Tensor& w, int64_t rows, int64_t cols, const char* name,
                               const char* where) {
  TORCH_CHECK(w.defined() && w.dim() == 2 && (rows < 0 || w.size(0) == rows) && w.size(1) == cols,
              where, ": ", name, " has shape ", (w.defined() ? w.sizes() : at::IntArrayRef{}),
              " but the inputs need [", (rows < 0 ? std::string("H") : std::to_string(rows)), ", ",
              cols, "]");
  return w;
}

}  // namespace

void check_qkv(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const char* where) {
  check_qk(q, k, where);
  check_rank3(v, "V", "[B, Tk, Dv]", where);
  TORCH_CHECK(k.size(0) == v.size(0), where, ": K ", k.sizes(), " and V ", v.sizes(),
              " have different batch sizes (dim 0)");
  TORCH_CHECK(k.size(1) == v.size(1), where, ": K ", k.sizes(), " and V ", v.sizes(),
              " must have the same length Tk (dim 1)");
}

at::Tensor concat_project_keys(const at::Tensor& k, const at::Tensor& weight,
                               const at::Tensor& bias, int64_t query_size) {
  const int64_t dk = k.size(-1);
  check_linear_weight(weight, 1, query_size + dk, "the concat score's weight", "concat_score");
  auto keys = at::matmul(k, weight.narrow(1, query_size, dk).t());  // [B, Tk, 1]
  return bias.defined() ? keys + bias : keys;
}

at::Tensor concat_score_projected(const at::Tensor& q, const at::Tensor& keys_proj,
                                  const at::Tensor& weight) {
  auto qs = at::matmul(q, weight.narrow(1, 0, q.size(-1)).t());  // [B, Tq, 1]
  return qs + keys_proj.transpose(1, 2);                         // [B, Tq, Tk]
}

at::Tensor concat_score(const at::Tensor& q, const at::Tensor& k, const at::Tensor& weight,
                        const at::Tensor& bias) {
  check_qk(q, k, "concat_score");
  return concat_score_projected(q, concat_project_keys(k, weight, bias, q.size(-1)), weight);
}

at::Tensor additive_project_keys(const at::Tensor& k, const at::Tensor& weight,
                                 const at::Tensor& bias, int64_t query_size) {
  const int64_t dk = k.size(-1);
  check_linear_weight(weight, -1, query_size + dk, "the additive score's weight", "additive_score");
  return kernels::linear(k, weight.narrow(1, query_size, dk), bias);  // [B, Tk, H]
}

at::Tensor additive_score_projected(const at::Tensor& q, const at::Tensor& keys_proj,
                                    const at::Tensor& weight, const at::Tensor& v) {
  auto qh = at::matmul(q, weight.narrow(1, 0, q.size(-1)).t());  // [B, Tq, H]
  auto e = at::tanh(qh.unsqueeze(2) + keys_proj.unsqueeze(1));   // [B, Tq, Tk, H]
  if (!v.defined()) return e.sum(-1);                            // [B, Tq, Tk]
  TORCH_CHECK(v.numel() == e.size(-1), "additive_score: v has shape ", v.sizes(),
              " but the hidden size is ", e.size(-1));
  return at::matmul(e, v.reshape({-1}));  // [B, Tq, Tk]
}

at::Tensor additive_score(const at::Tensor& q, const at::Tensor& k, const at::Tensor& weight,
                          const at::Tensor& bias, const at::Tensor& v) {
  check_qk(q, k, "additive_score");
  return additive_score_projected(q, additive_project_keys(k, weight, bias, q.size(-1)), weight, v);
}

at::Tensor dot_score(const at::Tensor& q, const at::Tensor& k) {
  check_qk(q, k, "dot_score");
  check_same_width(q, k, "dot_score");
  return at::matmul(q, k.transpose(1, 2));  // [B, Tq, Tk]
}

at::Tensor scaled_dot_score(const at::Tensor& q, const at::Tensor& k) {
  check_qk(q, k, "scaled_dot_score");
  check_same_width(q, k, "scaled_dot_score");
  return at::matmul(q, k.transpose(1, 2)) / std::sqrt(static_cast<double>(k.size(-1)));
}

at::Tensor general_score(const at::Tensor& q, const at::Tensor& k, const at::Tensor& weight) {
  check_qk(q, k, "general_score");
  check_linear_weight(weight, q.size(-1), k.size(-1), "the general score's weight",
                      "general_score");
  return at::matmul(q, at::matmul(k, weight.t()).transpose(1, 2));  // [B, Tq, Tk]
}

at::Tensor soft_weights(const at::Tensor& scores, const at::Tensor& mask) {
  if (!mask.defined()) return at::softmax(scores, -1);
  auto hidden = mask.logical_not();
  auto weights = at::softmax(scores.masked_fill(hidden, lowest(scores)), -1);
  return weights.masked_fill(hidden, 0);
}

at::Tensor gumbel_soft_weights(const at::Tensor& scores, const at::Tensor& mask, double temperature,
                               const at::Tensor& gumbel_noise) {
  TORCH_CHECK(temperature > 0, "gumbel: the temperature must be > 0, got ", temperature);
  auto noise = gumbel_noise.defined()
                   ? gumbel_noise
                   : -at::empty_like(scores, at::MemoryFormat::Contiguous).exponential_().log();
  TORCH_CHECK(noise.sizes() == scores.sizes(), "gumbel: noise has shape ", noise.sizes(),
              " but the scores have shape ", scores.sizes());
  return soft_weights((scores + noise) / temperature, mask);
}

at::Tensor hard_weights(const at::Tensor& scores, const at::Tensor& mask, HardGradient gradient,
                        double temperature, const at::Tensor& gumbel_noise) {
  if (scores.size(-1) == 0) return at::zeros_like(scores);
  at::Tensor soft;  // the distribution whose argmax is taken and whose gradient is used
  if (gradient == HardGradient::Gumbel) {
    soft = gumbel_soft_weights(scores, mask, temperature, gumbel_noise);
  } else if (gradient == HardGradient::StraightThrough) {
    soft = soft_weights(scores, mask);
  }
  at::Tensor pick_from = soft.defined() ? soft.detach()
                         : mask.defined()
                             ? scores.detach().masked_fill(mask.logical_not(), lowest(scores))
                             : scores.detach();
  auto index = pick_from.argmax(-1, /*keepdim=*/true);
  auto hard = at::zeros_like(scores, at::MemoryFormat::Contiguous).scatter_(-1, index, 1.0);
  // A fully masked row's argmax lands on a masked key; clearing masked keys zeroes the row.
  if (mask.defined()) hard = hard.masked_fill(mask.logical_not(), 0);
  if (!soft.defined()) return hard;
  return hard - soft.detach() + soft;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> sample_hard_weights(const at::Tensor& scores,
                                                                   const at::Tensor& mask) {
  auto probs = soft_weights(scores, mask);  // [..., Tq, Tk]
  const auto tk = scores.size(-1);
  if (tk == 0) {
    auto zero = at::zeros(scores.sizes().slice(0, scores.dim() - 1), scores.options());
    return {at::zeros_like(scores), zero, zero};
  }
  auto flat = probs.detach().reshape({-1, tk});
  auto valid = flat.sum(-1, /*keepdim=*/true) > 0;  // rows with a valid key
  auto index = at::multinomial(flat.masked_fill(valid.logical_not(), 1.0), 1)
                   .view(scores.sizes().slice(0, scores.dim() - 1))
                   .unsqueeze(-1);  // [..., Tq, 1]
  auto hard = at::zeros_like(scores, at::MemoryFormat::Contiguous).scatter_(-1, index, 1.0);
  auto row_valid = valid.view(index.sizes());
  hard = hard * row_valid;
  // log p and p log p with 0 log 0 = 0, so masked keys and empty rows contribute nothing.
  auto safe_log = at::log(probs.clamp_min(1e-30));
  auto log_prob = (safe_log.gather(-1, index) * row_valid).squeeze(-1);  // [..., Tq]
  auto entropy = -(probs * safe_log).sum(-1);                            // [..., Tq]
  return {hard, log_prob, entropy};
}

at::Tensor local_weights(const at::Tensor& scores, const at::Tensor& centres, int64_t window,
                         const at::Tensor& mask) {
  TORCH_CHECK(window >= 1, "local_weights: the window D must be >= 1, got ", window);
  TORCH_CHECK(centres.dim() == scores.dim() - 1 &&
                  centres.sizes() == scores.sizes().slice(0, scores.dim() - 1),
              "local_weights: centres have shape ", centres.sizes(), " but scores have shape ",
              scores.sizes(), "; expected the scores' shape without the last dimension");
  const int64_t tk = scores.size(-1);
  auto positions = at::arange(tk, scores.options());  // [Tk]
  auto offset = positions - centres.unsqueeze(-1);    // [..., Tq, Tk]
  auto in_window = offset.detach().abs() <= static_cast<double>(window);
  auto keep = mask.defined() ? in_window.logical_and(mask) : in_window;
  const double sigma = static_cast<double>(window) / 2.0;
  auto gaussian = at::exp(-offset.pow(2) / (2.0 * sigma * sigma));
  return soft_weights(scores, keep) * gaussian;
}

at::Tensor weights_for(WeightingKind kind, const at::Tensor& scores, const at::Tensor& mask,
                       HardGradient gradient, double temperature, const at::Tensor& centres,
                       int64_t window, const at::Tensor& gumbel_noise) {
  switch (kind) {
    case WeightingKind::Soft:  // soft_weights is the reference
      return scores.device().is_cpu() ? kernels::masked_softmax(scores, mask)
                                      : soft_weights(scores, mask);
    case WeightingKind::Hard:
      return hard_weights(scores, mask, gradient, temperature, gumbel_noise);
    case WeightingKind::Local:
      TORCH_CHECK(centres.defined(), "weights_for: local weighting needs centres");
      return local_weights(scores, centres, window, mask);
  }
  TORCH_CHECK(false, "weights_for: unknown weighting");
}

at::Tensor context(const at::Tensor& weights, const at::Tensor& v) {
  return at::matmul(weights, v);  // [B, Tq, Tk] x [B, Tk, Dv] -> [B, Tq, Dv]
}

std::pair<at::Tensor, at::Tensor> scaled_dot_product_attention(const at::Tensor& q,
                                                               const at::Tensor& k,
                                                               const at::Tensor& v,
                                                               const at::Tensor& mask,
                                                               double dropout) {
  TORCH_CHECK(q.dim() >= 2 && q.dim() == k.dim() && k.dim() == v.dim(),
              "scaled_dot_product_attention: Q ", q.sizes(), ", K ", k.sizes(), " and V ",
              v.sizes(), " must have the same rank (>= 2)");
  TORCH_CHECK(q.size(-1) == k.size(-1), "scaled_dot_product_attention: Q ", q.sizes(), " and K ",
              k.sizes(), " must have the same last dimension");
  TORCH_CHECK(k.size(-2) == v.size(-2), "scaled_dot_product_attention: K ", k.sizes(), " and V ",
              v.sizes(), " must have the same length (dim -2)");
  // Scaling Q ([..., Tq, d]) rather than the scores ([..., Tq, Tk]) touches fewer elements.
  auto scaled_q = q * (1.0 / std::sqrt(static_cast<double>(q.size(-1))));
  auto scores = at::matmul(scaled_q, k.transpose(-2, -1));  // [..., Tq, Tk]
  auto weights = soft_weights(scores, mask);
  // kernels::dropout draws one seed a call (at::dropout draws every element from the default
  // generator): the same masks when a batch's parts train on several threads at once.
  const auto used = kernels::dropout(weights, dropout, /*training=*/true);
  return {at::matmul(used, v), weights};  // [..., Tq, Dv], [..., Tq, Tk]
}

}  // namespace attnkit::functional
