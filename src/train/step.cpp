#include "attnkit/train/step.h"

#include <ATen/ATen.h>
#include <torch/optim/adam.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "attnkit/data/vocab.h"
#include "attnkit/kernels/ops/adam.h"
#include "attnkit/kernels/ops/grad_norm.h"
#include "attnkit/kernels/ops/loss.h"

namespace attnkit::train {

at::Tensor sequence_loss(const at::Tensor& logits, const at::Tensor& target, double smoothing,
                         bool fused) {
  if (fused) {
    auto per_token = kernels::label_smoothed_cross_entropy(logits.reshape({-1, logits.size(-1)}),
                                                           target.reshape({-1}), smoothing,
                                                           data::Vocab::kPad);  // [B * T]
    return per_token.sum() / (target != data::Vocab::kPad).sum().clamp_min(1);
  }
  auto log_probs = at::log_softmax(logits, -1);                        // [B, T, V]
  auto nll = -log_probs.gather(-1, target.unsqueeze(-1)).squeeze(-1);  // [B, T]
  auto loss = smoothing > 0 ? (1 - smoothing) * nll - smoothing * log_probs.mean(-1) : nll;
  auto mask = (target != data::Vocab::kPad).to(loss.scalar_type());
  return (loss * mask).sum() / mask.sum().clamp_min(1);
}

at::Tensor projected_loss(const at::Tensor& features, const at::Tensor& weight,
                          const at::Tensor& bias, const at::Tensor& target, double smoothing,
                          bool fused) {
  if (!fused) return sequence_loss(at::linear(features, weight, bias), target, smoothing, false);
  auto per_token = kernels::linear_cross_entropy(features.reshape({-1, features.size(-1)}), weight,
                                                 bias, target.reshape({-1}), smoothing,
                                                 data::Vocab::kPad);  // [N]
  return per_token.sum() / (target != data::Vocab::kPad).sum().clamp_min(1);
}

at::Tensor reinforce_objective(const at::Tensor& loss, const at::Tensor& logits,
                               const at::Tensor& target, const at::Tensor& log_prob,
                               const at::Tensor& entropy, double entropy_bonus,
                               ReinforceBaseline& baseline) {
  auto mask = (target != data::Vocab::kPad).to(at::kFloat);  // [B, T]
  auto nll =
      -at::log_softmax(logits.detach(), -1).gather(-1, target.unsqueeze(-1)).squeeze(-1);  // [B, T]
  auto reward = -(nll * mask).sum(1) / mask.sum(1).clamp_min(1);                           // [B]
  const double mean_reward = reward.mean().item<double>();
  if (!baseline.set) {
    baseline.value = mean_reward;
    baseline.set = true;
  }
  auto advantage = (reward - baseline.value).unsqueeze(1);  // [B, 1]
  const double tokens = mask.sum().item<double>();
  baseline.value = baseline.momentum * baseline.value + (1 - baseline.momentum) * mean_reward;
  return loss - (advantage * log_prob * mask).sum() / tokens -
         entropy_bonus * (entropy * mask).sum() / tokens;
}

namespace {

// The gradients: float32 ones as spans for the kernels (kernels/grad_norm.h), any other as is.
struct Gradients {
  std::vector<kernels::FloatSpan> spans;
  std::vector<at::Tensor> others;
};

Gradients gradients(const std::vector<at::Tensor>& parameters) {
  Gradients out;
  for (const auto& p : parameters) {
    const auto& g = p.grad();
    if (!g.defined()) continue;
    if (g.scalar_type() == at::kFloat && g.device().is_cpu() && g.is_contiguous() && !g.is_sparse())
      out.spans.push_back({g.data_ptr<float>(), g.numel()});
    else
      out.others.push_back(g);
  }
  return out;
}

GradClip grad_clip(const Gradients& g, double max_norm) {
  double squares = kernels::sum_of_squares(g.spans);
  for (const auto& t : g.others) {
    const double n = t.norm().item<double>();
    squares += n * n;
  }
  GradClip clip;
  clip.norm = std::sqrt(squares);
  clip.scale = std::min(1.0, max_norm / (clip.norm + 1e-6));
  return clip;
}

void scale(const Gradients& g, double factor) {
  if (factor == 1) return;
  kernels::scale(g.spans, static_cast<float>(factor));
  at::NoGradGuard no_grad;
  for (auto t : g.others) t.mul_(factor);
}

}  // namespace

GradClip grad_clip(const std::vector<at::Tensor>& parameters, double max_norm) {
  return grad_clip(gradients(parameters), max_norm);
}

double clip_grad_norm(const std::vector<at::Tensor>& parameters, double max_norm) {
  const auto g = gradients(parameters);
  const auto clip = grad_clip(g, max_norm);
  scale(g, clip.scale);
  return clip.norm;
}

void adam_step(torch::optim::Adam& optimizer, double grad_scale) {
  // The reference's path: the gradients scaled in place first, as clip_grad_norm scales them.
  auto step = [&] {
    std::vector<at::Tensor> parameters;
    for (auto& group : optimizer.param_groups())
      parameters.insert(parameters.end(), group.params().begin(), group.params().end());
    scale(gradients(parameters), grad_scale);
    optimizer.step();
  };
  auto fusable = [](const at::Tensor& t) {
    return t.defined() && t.scalar_type() == at::kFloat && t.device().is_cpu() &&
           t.is_contiguous() && !t.is_sparse();
  };
  // A parameter listed twice is stepped twice, one after the other, by the reference; the fused
  // pass updates every element once, in parallel.
  std::set<const void*> seen;
  for (auto& group : optimizer.param_groups()) {
    const auto& o = static_cast<const torch::optim::AdamOptions&>(group.options());
    if (o.weight_decay() != 0 || o.amsgrad()) return step();
    for (const auto& p : group.params())
      if (p.grad().defined() &&
          (!fusable(p) || !fusable(p.grad()) || !seen.insert(p.unsafeGetTensorImpl()).second))
        return step();
  }
  at::NoGradGuard no_grad;
  auto& states = optimizer.state();
  std::vector<kernels::AdamTensor> update;  // every parameter's, in one pass
  for (auto& group : optimizer.param_groups()) {
    const auto& o = static_cast<const torch::optim::AdamOptions&>(group.options());
    const double beta1 = std::get<0>(o.betas()), beta2 = std::get<1>(o.betas());
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      // The optimizer's own state, keyed and initialised as torch::optim::Adam::step does.
      const auto key = c10::guts::to_string(p.unsafeGetTensorImpl());
      auto it = states.find(key);
      if (it == states.end()) {
        auto fresh = std::make_unique<torch::optim::AdamParamState>();
        fresh->step(0);
        fresh->exp_avg(at::zeros_like(p, at::MemoryFormat::Preserve));
        fresh->exp_avg_sq(at::zeros_like(p, at::MemoryFormat::Preserve));
        it = states.emplace(key, std::move(fresh)).first;
      }
      auto& s = static_cast<torch::optim::AdamParamState&>(*it->second);
      TORCH_CHECK(fusable(s.exp_avg()) && fusable(s.exp_avg_sq()),
                  "adam_step: the optimizer state of a parameter is not a contiguous float tensor");
      s.step(s.step() + 1);
      const kernels::AdamUpdate u{static_cast<float>(beta1),
                                  static_cast<float>(beta2),
                                  static_cast<float>(o.eps()),
                                  static_cast<float>(o.lr() / (1 - std::pow(beta1, s.step()))),
                                  static_cast<float>(std::sqrt(1 - std::pow(beta2, s.step()))),
                                  static_cast<float>(grad_scale)};
      update.push_back({p.data_ptr<float>(), p.grad().data_ptr<float>(),
                        s.exp_avg().data_ptr<float>(), s.exp_avg_sq().data_ptr<float>(), p.numel(),
                        u});
      // Written through its buffer, not an in-place op: say so, as one would, so that caches
      // keyed on the version (the decoding step's packed weights) see the change.
      p.unsafeGetTensorImpl()->bump_version();
    }
  }
  kernels::adam_update(update);
}

void add_gradients(const std::vector<at::Tensor>& parameters,
                   const std::vector<std::vector<at::Tensor>>& parts) {
  at::NoGradGuard no_grad;
  auto spannable = [](const at::Tensor& t) {
    return t.scalar_type() == at::kFloat && t.device().is_cpu() && t.is_contiguous() &&
           !t.is_sparse();
  };
  for (const auto& part : parts) {
    std::vector<kernels::FloatSpan> sums;
    std::vector<const float*> addends;
    for (size_t i = 0; i < part.size(); ++i) {
      const auto& g = part[i];
      if (!g.defined()) continue;
      at::Tensor p = parameters[i];  // a handle of the parameter: its .grad is the parameter's
      auto& grad = p.mutable_grad();
      if (!grad.defined()) {
        // Taken as it is when nothing else holds its memory, as AccumulateGrad takes it; later
        // parts add to it in place.
        const bool alone = g.use_count() == 1 && g.storage().use_count() == 1;
        grad = alone && g.is_contiguous() ? g : g.clone(at::MemoryFormat::Contiguous);
      } else if (spannable(grad) && spannable(g)) {
        sums.push_back({grad.data_ptr<float>(), grad.numel()});
        addends.push_back(g.data_ptr<float>());
      } else {
        grad.add_(g);
      }
    }
    kernels::add(sums, addends);
  }
}

void clear_gradients(const std::vector<at::Tensor>& parameters) {
  for (const auto& p : parameters) p.mutable_grad() = at::Tensor();
}

}  // namespace attnkit::train
