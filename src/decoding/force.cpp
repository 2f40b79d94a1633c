#include "attnkit/decoding/force.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>

#include "attnkit/data/vocab.h"

namespace attnkit::decoding {

std::vector<ForcedScore> force(StepDecoder& decoder,
                               const std::vector<std::vector<int64_t>>& targets) {
  c10::InferenceMode inference;
  using data::Vocab;
  const auto batch = static_cast<int64_t>(targets.size());
  size_t longest = 0;
  for (const auto& t : targets) longest = std::max(longest, t.size());
  std::vector<ForcedScore> out(batch);
  std::vector<at::Tensor> steps;  // [B, S] per step
  // Every row stays in place: a row past its end is fed padding, as a search's dead beams are.
  std::vector<int64_t> fed(batch, Vocab::kSos);
  for (size_t t = 0; t <= longest; ++t) {
    auto step = decoder.step(at::tensor(fed, at::kLong));
    const auto log_probs = at::log_softmax(step.logits.to(at::kFloat), -1).contiguous();
    steps.push_back(step.attention.to(at::kFloat).contiguous());
    const auto lp = log_probs.accessor<float, 2>();
    for (int64_t b = 0; b < batch; ++b) {
      const auto& target = targets[b];
      if (t > target.size()) {
        fed[b] = Vocab::kPad;
        continue;
      }
      if (t == target.size()) out[b].next_log_probs = log_probs[b].clone();
      const int64_t want = t < target.size() ? target[t] : Vocab::kEos;
      const double p = lp[b][want];
      out[b].token_log_probs.push_back(p);
      out[b].log_prob += p;
      fed[b] = t < target.size() ? want : Vocab::kPad;
    }
  }
  for (int64_t b = 0; b < batch; ++b) {
    std::vector<at::Tensor> rows;
    for (size_t t = 0; t <= targets[b].size(); ++t) rows.push_back(steps[t][b]);
    out[b].attention = at::stack(rows);
  }
  return out;
}

}  // namespace attnkit::decoding
