#include "attnkit/attention/attention.h"

#include <ATen/ATen.h>

#include "attnkit/attention/functional.h"
#include "attnkit/attention/mask.h"
#include "attnkit/kernels/ops/context.h"

namespace attnkit {
namespace {

ScoreOptions score_options(const AttentionOptions& o) {
  return ScoreOptions(o.score(), o.query_size(), o.key_size()).hidden_size(o.hidden_size());
}

// Decoder steps have one query per row, where at::bmm runs a GEMM per row; the kernel makes one
// pass per row instead. functional::context (at::matmul) is the reference.
at::Tensor weighted_values(const at::Tensor& weights, const at::Tensor& v) {
  const bool few_queries = weights.dim() == 3 && v.dim() == 3 && weights.size(1) <= 4;
  const bool floating = weights.scalar_type() == v.scalar_type() &&
                        (v.scalar_type() == at::kFloat || v.scalar_type() == at::kDouble);
  return few_queries && floating ? kernels::attention_context(weights, v)
                                 : functional::context(weights, v);
}

}  // namespace

AttentionImpl::AttentionImpl(AttentionOptions options_)
    : options(std::move(options_)), score(score_options(options)) {
  register_module("score", score);
  if (options.weighting() == WeightingKind::Local) {
    const int64_t hidden = options.hidden_size() > 0 ? options.hidden_size() : options.key_size();
    local = register_module("local", LocalPosition(options.query_size(), hidden));
  }
}

at::Tensor AttentionImpl::project_keys(const at::Tensor& k) { return score->project_keys(k); }

AttentionOutput AttentionImpl::forward(const at::Tensor& q, const at::Tensor& k,
                                       const at::Tensor& v, const at::Tensor& mask) {
  functional::check_qkv(q, k, v, "Attention");
  TORCH_CHECK(q.size(2) == options.query_size() && k.size(2) == options.key_size(),
              "Attention: built for query_size ", options.query_size(), " and key_size ",
              options.key_size(), " but got Q ", q.sizes(), " and K ", k.sizes());
  return attend(q, project_keys(k), v, mask);
}

AttentionOutput AttentionImpl::attend(const at::Tensor& q, const at::Tensor& projected_keys,
                                      const at::Tensor& v, const at::Tensor& mask,
                                      const at::Tensor& query_weight) {
  TORCH_CHECK(v.dim() == 3 && projected_keys.dim() == 3 && projected_keys.size(1) == v.size(1),
              "Attention: the keys ", projected_keys.sizes(), " and V ", v.sizes(),
              " must have the same length Tk (dim 1)");
  const int64_t batch = q.size(0), tq = q.size(1), tk = v.size(1);
  auto keep = check_mask(mask, batch, tq, tk, "Attention");
  auto scores = score->score_projected(q, projected_keys, query_weight);  // [B, Tq, Tk]

  at::Tensor centres;
  if (options.weighting() == WeightingKind::Local) {
    auto lengths = keep.defined() ? keep.expand({batch, tq, tk}).sum(-1).to(q.scalar_type())
                                  : at::full({batch, tq}, static_cast<double>(tk), q.options());
    centres = local->forward(q, lengths);  // [B, Tq]
  }
  // Gradient estimators only matter while training; inference takes the plain argmax.
  const HardGradient gradient = is_training() ? options.hard_gradient() : HardGradient::None;
  if (options.weighting() == WeightingKind::Hard && gradient == HardGradient::Reinforce) {
    auto [weights, log_prob, entropy] = functional::sample_hard_weights(scores, keep);
    return {weighted_values(weights, v), weights, log_prob, entropy};
  }
  auto weights = functional::weights_for(options.weighting(), scores, keep, gradient,
                                         options.temperature(), centres, options.window());
  return {weighted_values(weights, v), weights};  // [B, Tq, Dv], [B, Tq, Tk]
}

}  // namespace attnkit
