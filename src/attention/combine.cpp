#include "attnkit/attention/combine.h"

#include <ATen/ATen.h>
#include <torch/nn/options/linear.h>

#include "attnkit/attention/functional.h"

namespace attnkit {

AttentionCombineImpl::AttentionCombineImpl(AttentionCombineOptions options_)
    : options(options_),
      attention(AttentionOptions(options.query_size(), options.key_size())
                    .score(options.score())
                    .weighting(options.weighting())
                    .hidden_size(options.hidden_size())),
      qc_linear(torch::nn::LinearOptions(options.query_size() + options.value_size(),
                                         options.output_size())) {
  register_module("attention", attention);
  register_module("qc_linear", qc_linear);
}

AttentionOutput AttentionCombineImpl::forward(const at::Tensor& q, const at::Tensor& k,
                                              const at::Tensor& v, const at::Tensor& mask) {
  functional::check_qkv(q, k, v, "AttentionCombine");
  TORCH_CHECK(v.size(2) == options.value_size(), "AttentionCombine: built for value_size ",
              options.value_size(), " but V has shape ", v.sizes());
  auto attended = attention->forward(q, k, v, mask);          // C [B, Tq, Dv]
  auto combined = at::cat({q, attended.output}, /*dim=*/-1);  // [B, Tq, Dq + Dv]
  return {qc_linear(combined), attended.weights};             // [B, Tq, output_size]
}

const std::vector<std::pair<std::string, std::string>>& notes_attn_renames() {
  static const std::vector<std::pair<std::string, std::string>> renames = {
      {"qk_linear.", "attention.score.linear."}};
  return renames;
}

}  // namespace attnkit
