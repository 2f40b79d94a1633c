#include "attnkit/kernels/ops/dispatch.h"

#include <ATen/ATen.h>
#include <torch/nn/utils/rnn.h>

#include <vector>

#include "attnkit/kernels/blocks/gru.h"
#include "attnkit/kernels/ops/dropout.h"
#include "attnkit/kernels/ops/linear.h"

namespace attnkit::kernels::dispatch {

at::Tensor dropout(Path path, const at::Tensor& x, double p, bool training) {
  return path == Path::Fused ? kernels::dropout(x, p, training) : at::dropout(x, p, training);
}

at::Tensor linear(Path path, const at::Tensor& x, const at::Tensor& weight,
                  const at::Tensor& bias) {
  return path == Path::Fused ? kernels::linear(x, weight, bias) : at::linear(x, weight, bias);
}

std::tuple<at::Tensor, at::Tensor> gru(Path path, torch::nn::GRU& gru, const at::Tensor& embedded,
                                       const at::Tensor& lengths, bool training) {
  const int64_t batch = embedded.size(0), len = embedded.size(1);
  const auto& o = gru->options;
  auto cpu_lengths = lengths.to(at::kCPU).to(at::kLong);
  if (path == Path::Reference) {
    auto packed = torch::nn::utils::rnn::pack_padded_sequence(
        embedded, cpu_lengths, /*batch_first=*/true, /*enforce_sorted=*/false);
    auto [packed_out, h_n] = gru->forward_with_packed_input(packed);
    auto outputs = std::get<0>(torch::nn::utils::rnn::pad_packed_sequence(
        packed_out, /*batch_first=*/true, /*padding_value=*/0.0, /*total_length=*/len));
    return {outputs, h_n};
  }
  // all_weights(): w_ih, w_hh, b_ih, b_hh for each layer, directions innermost (PyTorch's order).
  const auto weights = gru->all_weights();
  const int64_t dirs = o.bidirectional() ? 2 : 1;
  auto x = embedded;  // [B, S, in]
  std::vector<at::Tensor> finals;
  for (int64_t l = 0; l < o.num_layers(); ++l) {
    std::vector<at::Tensor> outputs;
    for (int64_t d = 0; d < dirs; ++d) {
      const auto* w = &weights[4 * (l * dirs + d)];
      auto gi = kernels::linear(x, w[0], w[2]);  // [B, S, 3H]: all steps' input projections
      auto h0 = at::zeros({batch, o.hidden_size()}, x.options());
      auto [out, final] =
          kernels::gru_sequence(gi, h0, w[1], w[3], cpu_lengths, /*reverse=*/d == 1);
      outputs.push_back(out);  // [B, S, H]
      finals.push_back(final);
    }
    x = dirs == 1 ? outputs[0] : at::cat(outputs, -1);  // [B, S, H * dirs]
    if (l + 1 < o.num_layers()) x = kernels::dropout(x, o.dropout(), training);
  }
  return {x, at::stack(finals)};
}

at::Tensor gru_step(Path path, torch::nn::GRU& gru, const at::Tensor& input,
                    const at::Tensor& hidden, bool training) {
  if (path == Path::Reference) return std::get<1>(gru(input.unsqueeze(1), hidden));
  const auto weights = gru->all_weights();
  return gru_step_gates(gru, at::linear(input, weights[0], weights[2]), hidden, training);
}

at::Tensor gru_step_gates(torch::nn::GRU& gru, const at::Tensor& gates, const at::Tensor& hidden,
                          bool training) {
  const auto weights = gru->all_weights();  // w_ih, w_hh, b_ih, b_hh per layer
  std::vector<at::Tensor> states;
  at::Tensor gi = gates;  // [N, 3H]
  for (int64_t l = 0; l < gru->options.num_layers(); ++l) {
    const auto* w = &weights[4 * l];
    if (l > 0) {
      auto x = kernels::dropout(states.back(), gru->options.dropout(), training);  // [N, H]
      gi = at::linear(x, w[0], w[2]);
    }
    states.push_back(kernels::gru_cell(gi, hidden[l], w[1], w[3]));
  }
  return at::stack(states);  // [L, N, H]
}

}  // namespace attnkit::kernels::dispatch
