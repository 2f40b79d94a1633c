#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include <string>
#include <utility>
#include <vector>

#include "attnkit/attention/attention.h"

namespace attnkit {

struct AttentionCombineOptions {
  AttentionCombineOptions(int64_t query_size, int64_t key_size, int64_t value_size,
                          int64_t output_size)
      : query_size_(query_size),
        key_size_(key_size),
        value_size_(value_size),
        output_size_(output_size) {}
  TORCH_ARG(int64_t, query_size);
  TORCH_ARG(int64_t, key_size);
  TORCH_ARG(int64_t, value_size);  // the notes' c_size: C has V's width
  TORCH_ARG(int64_t, output_size);
  TORCH_ARG(ScoreKind, score) = ScoreKind::Concat;
  TORCH_ARG(WeightingKind, weighting) = WeightingKind::Soft;
  TORCH_ARG(int64_t, hidden_size) = 0;
};

// The notes' Attn module (MyAttn): score Q against K (by default concat + Linear), softmax,
// C = weights V, then Linear([Q; C]) -> output_size. Unlike the notes' code, output_size is
// honoured (the notes build qc_linear with c_size outputs and ignores output_size).
class AttentionCombineImpl : public torch::nn::Module {
 public:
  explicit AttentionCombineImpl(AttentionCombineOptions options);
  // q [B, Tq, Dq], k [B, Tk, Dk], v [B, Tk, Dv] -> output [B, Tq, output_size], weights [B, Tq,
  // Tk].
  AttentionOutput forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                          const at::Tensor& mask = {});

  AttentionCombineOptions options;
  Attention attention{nullptr};
  torch::nn::Linear qc_linear{nullptr};
};
TORCH_MODULE(AttentionCombine);

// Renames that load the notes' MyAttn state_dict (qk_linear.*, qc_linear.*) into AttentionCombine.
const std::vector<std::pair<std::string, std::string>>& notes_attn_renames();

}  // namespace attnkit
