#include "attnkit/attention/score.h"

#include <torch/nn/functional/activation.h>
#include <torch/nn/options/linear.h>

#include "attnkit/attention/functional.h"
#include "attnkit/kernels/ops/additive_score.h"

namespace attnkit {
namespace {

using torch::nn::Linear;
using torch::nn::LinearOptions;

int64_t hidden_of(const ScoreOptions& o) {
  return o.hidden_size() > 0 ? o.hidden_size() : o.key_size();
}

Linear make_linear(const ScoreOptions& o) {
  const int64_t in = o.query_size() + o.key_size();
  switch (o.kind()) {
    case ScoreKind::Concat:
      return Linear(LinearOptions(in, 1).bias(o.bias()));
    case ScoreKind::Additive:
    case ScoreKind::Bahdanau:
      return Linear(LinearOptions(in, hidden_of(o)).bias(o.bias()));
    case ScoreKind::General:
      return Linear(LinearOptions(o.key_size(), o.query_size()).bias(false));
    case ScoreKind::Dot:
    case ScoreKind::ScaledDot:
      return nullptr;
  }
  return nullptr;
}

Linear make_v(const ScoreOptions& o) {
  if (o.kind() != ScoreKind::Bahdanau) return nullptr;
  return Linear(LinearOptions(hidden_of(o), 1).bias(false));
}

at::Tensor bias_of(const Linear& l) { return l->options.bias() ? l->bias : at::Tensor(); }

}  // namespace

ScoreImpl::ScoreImpl(ScoreOptions options_)
    : options(std::move(options_)), linear(make_linear(options)), v(make_v(options)) {
  TORCH_CHECK(options.query_size() > 0 && options.key_size() > 0,
              "Score: query_size and key_size must be positive, got ", options.query_size(),
              " and ", options.key_size());
  const bool dot = options.kind() == ScoreKind::Dot || options.kind() == ScoreKind::ScaledDot;
  TORCH_CHECK(!dot || options.query_size() == options.key_size(), "Score: a ",
              to_string(options.kind()), " score needs query_size == key_size, got ",
              options.query_size(), " and ", options.key_size(),
              " (use general, additive or concat for different sizes)");
  if (linear) register_module("linear", linear);
  if (v) register_module("v", v);
}

at::Tensor ScoreImpl::project_keys(const at::Tensor& k) {
  TORCH_CHECK(k.dim() == 3 && k.size(-1) == options.key_size(), "Score: K must be [B, Tk, ",
              options.key_size(), "] but has shape ", k.sizes());
  switch (options.kind()) {
    case ScoreKind::Concat:
      return functional::concat_project_keys(k, linear->weight, bias_of(linear),
                                             options.query_size());  // [B, Tk, 1]
    case ScoreKind::Additive:
    case ScoreKind::Bahdanau:
      return functional::additive_project_keys(k, linear->weight, bias_of(linear),
                                               options.query_size());  // [B, Tk, H]
    case ScoreKind::General:
      return at::matmul(k, linear->weight.t());  // [B, Tk, Dq]
    case ScoreKind::Dot:
    case ScoreKind::ScaledDot:
      return k;  // [B, Tk, Dk]
  }
  TORCH_CHECK(false, "Score: unknown kind");
}

at::Tensor ScoreImpl::query_weight() const {
  if (options.kind() != ScoreKind::Additive && options.kind() != ScoreKind::Bahdanau) return {};
  return linear->weight.narrow(1, 0, options.query_size());  // [H, Dq]
}

at::Tensor ScoreImpl::score_projected(const at::Tensor& q, const at::Tensor& keys,
                                      const at::Tensor& query_weight) {
  TORCH_CHECK(q.dim() == 3 && q.size(-1) == options.query_size(), "Score: Q must be [B, Tq, ",
              options.query_size(), "] but has shape ", q.sizes());
  TORCH_CHECK(keys.dim() == 3 && keys.size(0) == q.size(0), "Score: Q ", q.sizes(),
              " and the projected keys ", keys.sizes(), " have different batch sizes");
  switch (options.kind()) {
    case ScoreKind::Concat:
      return functional::concat_score_projected(q, keys, linear->weight);
    case ScoreKind::Additive:
    case ScoreKind::Bahdanau: {
      const at::Tensor v_weight = options.kind() == ScoreKind::Bahdanau ? v->weight : at::Tensor();
      if (options.fused() && q.scalar_type() == at::kFloat && keys.scalar_type() == at::kFloat) {
        const auto w = query_weight.defined() ? query_weight : this->query_weight();
        auto qh = at::matmul(q, w.t());                            // [B, Tq, H]
        return kernels::fused_additive_score(qh, keys, v_weight);  // [B, Tq, Tk]
      }
      return functional::additive_score_projected(q, keys, linear->weight, v_weight);
    }
    case ScoreKind::General:
    case ScoreKind::Dot:
      return at::matmul(q, keys.transpose(1, 2));  // [B, Tq, Tk]
    case ScoreKind::ScaledDot:
      return functional::scaled_dot_score(q, keys);
  }
  TORCH_CHECK(false, "Score: unknown kind");
}

at::Tensor ScoreImpl::forward(const at::Tensor& q, const at::Tensor& k) {
  TORCH_CHECK(q.dim() == 3 && k.dim() == 3 && q.size(0) == k.size(0), "Score: Q ", q.sizes(),
              " and K ", k.sizes(), " must be [B, Tq, Dq] and [B, Tk, Dk] with the same B");
  return score_projected(q, project_keys(k));
}

LocalPositionImpl::LocalPositionImpl(int64_t query_size, int64_t hidden_size)
    : w_p(LinearOptions(query_size, hidden_size).bias(false)),
      v_p(LinearOptions(hidden_size, 1).bias(false)) {
  register_module("w_p", w_p);
  register_module("v_p", v_p);
}

at::Tensor LocalPositionImpl::forward(const at::Tensor& q, const at::Tensor& source_lengths) {
  auto gate = at::sigmoid(v_p(at::tanh(w_p(q)))).squeeze(-1);  // [B, Tq]
  return (source_lengths - 1).clamp_min(0) * gate;             // [B, Tq]
}

}  // namespace attnkit
