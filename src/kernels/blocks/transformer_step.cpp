#include "attnkit/kernels/blocks/transformer_step.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>

#include "../cpu/row_parts.h"
#include "../cpu/simd.h"
#include "../ops/attend_row.h"
#include "../ops/layer_norm_rows.h"

namespace attnkit::kernels {
namespace {

// out = (x - mean) / sqrt(var + eps) * w + b over each row of D, as at::layer_norm; out may be x.
void layer_norm(const float* x, int64_t rows, int64_t D, const at::Tensor& w, const at::Tensor& b,
                double eps, float* out) {
  layer_norm_rows::forward<float>(x, w.data_ptr<float>(), b.data_ptr<float>(), out,
                                  /*mean=*/nullptr, /*rstd=*/nullptr, 0, rows, D, eps);
}

// A sublayer's output o joins the residual stream h: h + o pre-norm, norm(h + o) post-norm.
void join(float* h, const float* o, int64_t rows, int64_t D, bool norm_first, const at::Tensor& w,
          const at::Tensor& b, double eps) {
  simd::axpy(1.f, o, h, rows * D);  // 1 * o is exact: the same bits as h[i] += o[i]
  if (!norm_first) layer_norm(h, rows, D, w, b, eps, h);
}

// y = p(x) on raw rows, y contiguous.
void product(const PackedLinear& p, const float* x, int64_t rows, float* y) {
  p.apply(x, rows, /*ldx=*/p.in(), y, /*ldy=*/p.out());
}

float gelu(float x) { return 0.5f * x * (1.f + std::erf(x * static_cast<float>(M_SQRT1_2))); }

}  // namespace

TransformerDecoderStep::TransformerDecoderStep(std::shared_ptr<const TransformerStepWeights> w)
    : weights_(std::move(w)), caches_(weights_->layers.size()) {}

void TransformerDecoderStep::reorder(const std::vector<int64_t>& origin) {
  const int64_t rows = static_cast<int64_t>(origin.size());
  std::vector<int64_t> history(rows * length_);
  for (int64_t i = 0; i < rows; ++i) {
    TORCH_CHECK(origin[i] >= 0 && origin[i] < rows_, "TransformerDecoderStep: row ", origin[i],
                " is not one of the ", rows_, " rows");
    std::copy_n(history_.begin() + origin[i] * length_, length_, history.begin() + i * length_);
  }
  history_ = std::move(history);
  rows_ = rows;
}

at::Tensor TransformerDecoderStep::operator()(const at::Tensor& x,
                                              const std::vector<at::Tensor>& memory_keys,
                                              const std::vector<at::Tensor>& memory_values,
                                              const at::Tensor& memory_mask, int64_t width,
                                              const std::vector<int64_t>& slots,
                                              at::Tensor* attention) {
  const auto& w = *weights_;
  const int64_t N = x.size(0), D = x.size(1), H = w.heads, d = D / H;
  const int64_t L = static_cast<int64_t>(w.layers.size()), F = w.layers[0].linear1.out();
  const int64_t S = memory_mask.size(1);
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == at::kFloat && D == w.layers[0].self_out.out(),
              "TransformerDecoderStep: x must be float32 [N, ", w.layers[0].self_out.out(),
              "], got ", x.sizes());
  const int64_t sources = memory_mask.size(0);
  const int64_t A = slots.empty() ? sources : static_cast<int64_t>(slots.size());
  TORCH_CHECK(static_cast<int64_t>(memory_keys.size()) == L && A * width == N &&
                  memory_keys[0].size(0) == sources && memory_keys[0].size(2) == S,
              "TransformerDecoderStep: ", N, " rows do not match ", A, " sentences x ", width,
              " with ", memory_keys.size(), " layers of source keys");
  for (int64_t slot : slots)
    TORCH_CHECK(slot >= 0 && slot < sources, "TransformerDecoderStep: source ", slot,
                " is not one of the ", sources);
  if (length_ == 0) rows_ = N;
  TORCH_CHECK(N == rows_, "TransformerDecoderStep: ", N, " rows, but the caches hold ", rows_,
              " (reorder() first)");
  const int64_t t = length_;
  const float scale = 1.f / std::sqrt(static_cast<float>(d));
  const auto xc = x.contiguous();
  h_.assign(xc.data_ptr<float>(), xc.data_ptr<float>() + N * D);
  y_.resize(N * D);
  wide_.resize(N * std::max(3 * D, F));
  merged_.resize(N * D);
  out_.resize(N * D);
  const auto mask = memory_mask.to(at::kBool).contiguous();
  const bool* keep_all = mask.data_ptr<bool>();
  if (attention) *attention = at::zeros({N, S});
  // A sublayer's input: the normed stream pre-norm, the stream itself post-norm.
  auto input = [&](const at::Tensor& nw, const at::Tensor& nb) -> const float* {
    if (!w.norm_first) return h_.data();
    layer_norm(h_.data(), N, D, nw, nb, w.eps, y_.data());
    return y_.data();
  };
  for (int64_t l = 0; l < L; ++l) {
    const auto& p = w.layers[l];
    auto& cache = caches_[l];
    // Self-attention: the newest keys and values are this step's, written once; a row's query
    // reads its history's. Rows are independent, so blocks of them go to the kernels' threads:
    // with one batch at a time, these loops had run on one core while the other waited.
    product(p.self_qkv, input(p.norm1_weight, p.norm1_bias), N, wide_.data());  // [N, 3D]
    cache.keys.emplace_back(new float[N * D]);  // [N, H, d] = [N, D]
    cache.values.emplace_back(new float[N * D]);
    for_each_row_block(N, /*per_row=*/2 * H * (t + 1) * d, [&](int64_t from, int64_t to) {
      std::vector<float> scores(t + 1);
      std::vector<const float*> keys(t + 1), values(t + 1);
      for (int64_t n = from; n < to; ++n) {
        std::copy_n(wide_.data() + n * 3 * D + D, D, cache.keys[t].get() + n * D);
        std::copy_n(wide_.data() + n * 3 * D + 2 * D, D, cache.values[t].get() + n * D);
        for (int64_t head = 0; head < H; ++head) {
          for (int64_t j = 0; j <= t; ++j) {
            const int64_t writer = j < t ? history_[n * t + j] : n;
            keys[j] = cache.keys[j].get() + writer * D + head * d;
            values[j] = cache.values[j].get() + writer * D + head * d;
          }
          attend_row(wide_.data() + n * 3 * D + head * d, keys.data(), values.data(), t + 1, d,
                     /*keep=*/nullptr, scale, scores.data(), merged_.data() + n * D + head * d);
        }
      }
    });
    product(p.self_out, merged_.data(), N, out_.data());
    join(h_.data(), out_.data(), N, D, w.norm_first, p.norm1_weight, p.norm1_bias, w.eps);

    // Cross-attention: a sentence's rows are queries against its one copy of the source.
    product(p.cross_q, input(p.norm2_weight, p.norm2_bias), N, wide_.data());  // [N, D]
    const auto mk = memory_keys[l].contiguous(), mv = memory_values[l].contiguous();
    for_each_row_block(N, /*per_row=*/2 * H * S * d, [&](int64_t from, int64_t to) {
      std::vector<float> scores(S);
      for (int64_t n = from; n < to; ++n) {
        const int64_t a = slots.empty() ? n / width : slots[n / width];
        const bool* keep = keep_all + a * S;
        for (int64_t head = 0; head < H; ++head) {
          const int64_t source = (a * H + head) * S * d;
          attend_row(wide_.data() + n * D + head * d, mk.data_ptr<float>() + source,
                     mv.data_ptr<float>() + source, S, d, keep, scale, scores.data(),
                     merged_.data() + n * D + head * d);
          if (attention && l == w.alignment_layer)
            simd::axpy(1.f / static_cast<float>(H), scores.data(),
                       attention->data_ptr<float>() + n * S, S);
        }
      }
    });
    product(p.cross_out, merged_.data(), N, out_.data());
    join(h_.data(), out_.data(), N, D, w.norm_first, p.norm2_weight, p.norm2_bias, w.eps);

    // Feed-forward.
    product(p.linear1, input(p.norm3_weight, p.norm3_bias), N, wide_.data());  // [N, F]
    for_each_row_block(N, /*per_row=*/F, [&](int64_t from, int64_t to) {
      if (!w.gelu) return simd::relu_inplace(wide_.data() + from * F, (to - from) * F);
      for (int64_t i = from * F; i < to * F; ++i) wide_[i] = gelu(wide_[i]);
    });
    product(p.linear2, wide_.data(), N, out_.data());
    join(h_.data(), out_.data(), N, D, w.norm_first, p.norm3_weight, p.norm3_bias, w.eps);
  }
  layer_norm(h_.data(), N, D, w.norm_weight, w.norm_bias, w.eps, y_.data());
  auto logits = at::empty({N, w.output.out()});
  product(w.output, y_.data(), N, logits.data_ptr<float>());
  // Each row's position t is its own.
  std::vector<int64_t> history(N * (t + 1));
  for (int64_t n = 0; n < N; ++n) {
    std::copy_n(history_.begin() + n * t, t, history.begin() + n * (t + 1));
    history[n * (t + 1) + t] = n;
  }
  history_ = std::move(history);
  ++length_;
  return logits;
}

}  // namespace attnkit::kernels
