#include "attnkit/kernels/blocks/gru_encoder.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <numeric>

#include "../cpu/row_parts.h"
#include "gru_rows.h"

namespace attnkit::kernels {

PackedGru::PackedGru(const std::vector<GruWeights>& weights, int64_t directions, ComputeType type)
    : directions_(directions) {
  TORCH_CHECK(directions >= 1 && !weights.empty() && weights.size() % directions == 0,
              "PackedGru: ", weights.size(), " layer-directions for ", directions, " directions");
  hidden_ = weights[0].w_hh.size(1);
  for (const auto& w : weights) {
    TORCH_CHECK(w.w_hh.dim() == 2 && w.w_hh.size(0) == 3 * hidden_ && w.w_hh.size(1) == hidden_ &&
                    w.w_ih.dim() == 2 && w.w_ih.size(0) == 3 * hidden_,
                "PackedGru: w_ih ", w.w_ih.sizes(), " and w_hh ", w.w_hh.sizes(),
                " must be [3H, I] and [3H, H] for H = ", hidden_);
    input_.emplace_back(w.w_ih, w.b_ih, type);
    recurrent_.emplace_back(w.w_hh, w.b_hh, type);
  }
}

void PackedGru::run(int64_t index, bool reverse, const float* x, int64_t batch, int64_t len,
                    int64_t in, const std::vector<int64_t>& order,
                    const std::vector<int64_t>& steps, float* out, float* final) const {
  const int64_t H = hidden_, width = H * directions_, d = index % directions_;
  // Every position's input projection in one product (padding included: a sorted batch has
  // little), then one recurrent product per step over the rows still running (a prefix).
  std::vector<float> gi(batch * len * 3 * H), gh(batch * 3 * H), h(batch * H, 0.f);
  input_[index].apply(x, batch * len, /*ldx=*/in, gi.data(), /*ldy=*/3 * H);
  for (int64_t s = 0; s < len; ++s) {
    const int64_t t = reverse ? len - 1 - s : s;
    int64_t rows = 0;
    while (rows < batch && steps[rows] > t) ++rows;
    recurrent_[index].apply(h.data(), rows, /*ldx=*/H, gh.data(), /*ldy=*/3 * H);
    for (int64_t b = 0; b < rows; ++b) {
      const int64_t at_step = order[b] * len + t;
      float* hb = h.data() + b * H;
      gru_rows::gates<float>(gi.data() + at_step * 3 * H, gh.data() + b * 3 * H, hb, hb,
                             /*save=*/nullptr, H);
      std::copy(hb, hb + H, out + at_step * width + d * H);
    }
  }
  for (int64_t b = 0; b < batch; ++b)
    std::copy(h.data() + b * H, h.data() + (b + 1) * H, final + order[b] * H);
}

std::pair<at::Tensor, at::Tensor> PackedGru::operator()(const at::Tensor& x,
                                                        const at::Tensor& lengths) const {
  TORCH_CHECK(x.dim() == 3 && x.scalar_type() == at::kFloat && lengths.dim() == 1 &&
                  lengths.size(0) == x.size(0),
              "PackedGru: x must be float32 [B, S, I] and lengths [B], got ", x.sizes(), " and ",
              lengths.sizes());
  const int64_t B = x.size(0), S = x.size(1), H = hidden_, D = directions_;
  const int64_t layers = static_cast<int64_t>(input_.size()) / D;
  const auto len = lengths.to(at::kCPU).to(at::kLong).contiguous();
  std::vector<int64_t> order(B), steps(B);  // rows longest first, and their lengths
  std::iota(order.begin(), order.end(), 0);
  const int64_t* l = len.data_ptr<int64_t>();
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return l[a] > l[b]; });
  for (int64_t b = 0; b < B; ++b) {
    steps[b] = l[order[b]];
    TORCH_CHECK(steps[b] >= 1 && steps[b] <= S, "PackedGru: length ", steps[b], " outside 1..", S);
  }
  auto input = x.contiguous();
  auto finals = at::empty({layers * D, B, H});
  for (int64_t layer = 0; layer < layers; ++layer) {
    auto out = at::zeros({B, S, H * D});  // zero past each length
    const int64_t in = input.size(2);
    TORCH_CHECK(in == input_[layer * D].in(), "PackedGru: layer ", layer, " takes ",
                input_[layer * D].in(), " inputs, got ", in);
    auto direction = [&](int64_t d) {
      run(layer * D + d, /*reverse=*/d == 1, input.data_ptr<float>(), B, S, in, order, steps,
          out.data_ptr<float>(), finals.data_ptr<float>() + (layer * D + d) * B * H);
    };
    // The directions share nothing until the layer ends: one thread each where there are two.
    if (D > 1 && row_parts(D) >= D)
      for_each_row_part(D, [&](RowPart part) { direction(part.first); });
    else
      for (int64_t d = 0; d < D; ++d) direction(d);
    input = out;
  }
  return {input, finals};
}

}  // namespace attnkit::kernels
