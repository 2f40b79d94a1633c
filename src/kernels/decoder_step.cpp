#include "attnkit/kernels/decoder_step.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "attnkit/kernels/gru.h"
#include "blas.h"
#include "packed_gemm.h"
#include "row_parts.h"
#include "simd.h"
#include "softmax_row.h"

namespace attnkit::kernels {
namespace {

using packed::Panels;

// A weight as the step reads it: no copy, so a search over one short sentence does not pay for
// copying the column blocks (the query half of the score, the feed's part of W_ih) it views.
at::Tensor frozen(const at::Tensor& t) {
  if (!t.defined()) return t;
  auto w = t.detach();
  return w.dim() == 2 && w.stride(1) == 1 ? w : w.contiguous();
}

// A weight [out, in] and its packed panels.
struct Weight {
  at::Tensor w;  // rows as far apart as the module keeps them
  Panels<float> panels;
  explicit Weight(const at::Tensor& t = {}) : w(frozen(t)) {
    if (w.defined())
      panels = Panels<float>::transposed(w.data_ptr<float>(), w.size(0), w.size(1), w.stride(0));
  }
  int64_t out() const { return w.size(0); }
};

// y[rows, out] = x W^T (+ y when accumulate) on the packed panels, whatever the rows: one to
// three rows take the wide blocks, and too few rows for the threads split the columns. One GEMV
// per row through BLAS was as fast only on OpenBLAS's best kernels: greedy decoding at batch 1
// ran 0.36x as fast where OpenBLAS picked its SSE3 ones (OPENBLAS_CORETYPE=Prescott on Zen 5).
void product(const float* x, int64_t rows, int64_t in, const Weight& w, float* y, bool accumulate) {
  w.panels.multiply_parallel(x, rows, /*ldx=*/in, y, /*ldy=*/w.out(), accumulate, /*kstride=*/1,
                             row_parts(rows, 2.0 * rows * in * w.out()));
}

// y[rows, out] = bias + x W^T
void affine(const float* x, int64_t rows, int64_t in, const Weight& w, const at::Tensor& b,
            float* y) {
  const int64_t out = w.out();
  for (int64_t r = 0; r < rows; ++r)
    std::copy(b.data_ptr<float>(), b.data_ptr<float>() + out, y + r * out);
  product(x, rows, in, w, y, /*accumulate=*/true);
}

}  // namespace

struct PackedDecoderWeights::Impl {
  at::Tensor table;                // [V, 3H]
  Weight feed;                     // [3H, H], or empty
  std::vector<Weight> w_ih, w_hh;  // per layer (w_ih from the second layer on)
  std::vector<at::Tensor> b_ih, b_hh;
  Weight query;            // [A, H]
  at::Tensor v;            // [A]
  Weight combine, output;  // [H, H + Hm], [V, H]
  at::Tensor b_combine, b_output;
};

PackedDecoderWeights::PackedDecoderWeights(const DecoderStepWeights& w) {
  TORCH_CHECK(w.w_hh.size() == w.b_hh.size() && w.w_hh.size() == w.w_ih.size() &&
                  w.w_hh.size() == w.b_ih.size() && !w.w_hh.empty(),
              "DecoderStep: every GRU layer needs w_ih, w_hh, b_ih and b_hh");
  auto p = std::make_unique<Impl>();
  p->table = w.table.detach().contiguous();
  if (w.w_feed.defined()) p->feed = Weight(w.w_feed);
  for (size_t l = 0; l < w.w_hh.size(); ++l) {
    p->w_ih.emplace_back(l > 0 ? w.w_ih[l] : at::Tensor());
    p->w_hh.emplace_back(w.w_hh[l]);
    p->b_ih.push_back(frozen(w.b_ih[l]));
    p->b_hh.push_back(frozen(w.b_hh[l]));
  }
  p->query = Weight(w.w_query);
  p->v = frozen(w.v);
  p->combine = Weight(w.w_combine);
  p->b_combine = frozen(w.b_combine);
  p->output = Weight(w.w_output);
  p->b_output = frozen(w.b_output);
  impl_ = std::move(p);
}

PackedDecoderWeights::~PackedDecoderWeights() = default;

DecoderStep::DecoderStep(std::shared_ptr<const PackedDecoderWeights> weights)
    : weights_(std::move(weights)) {}

DecoderStepOutputs DecoderStep::operator()(const DecoderStepInputs& in) {
  const auto& p = weights_->impl();
  const auto tokens = in.tokens.to(at::kLong).contiguous();
  const int64_t N = tokens.size(0), L = static_cast<int64_t>(p.w_hh.size());
  const int64_t H = p.w_hh[0].w.size(1), A = p.query.out(), V = p.output.out();
  const int64_t S = in.memory.size(1), Hm = in.memory.size(2);
  TORCH_CHECK(in.hidden.size(0) == L && in.hidden.size(1) == N && in.memory.size(0) == N &&
                  in.keys.size(2) == A,
              "DecoderStep: the state's rows do not match the ", N, " tokens");
  const auto memory = in.memory.contiguous(), keys = in.keys.contiguous();
  const auto mask = in.mask.defined() ? in.mask.expand({N, 1, S}).contiguous() : at::Tensor();
  const auto hidden = in.hidden.contiguous();
  gi_.resize(N * 3 * H);
  gh_.resize(N * 3 * H);
  query_.resize(N * A);
  combine_in_.resize(N * (H + Hm));

  // GRU layers: [L, N, H]. The first layer's input is [embedding; feed]: its embedding part
  // (with the bias) comes from the table, and only the feed goes through a product.
  const int64_t* tok = tokens.data_ptr<int64_t>();
  const float* table = p.table.data_ptr<float>();
  for (int64_t n = 0; n < N; ++n) {
    TORCH_CHECK(tok[n] >= 0 && tok[n] < p.table.size(0), "DecoderStep: token id ", tok[n],
                " is outside the target vocabulary");
    std::copy(table + tok[n] * 3 * H, table + (tok[n] + 1) * 3 * H, gi_.data() + n * 3 * H);
  }
  const auto feed_in = p.feed.w.defined() ? in.feed.contiguous() : at::Tensor();
  if (feed_in.defined())
    product(feed_in.data_ptr<float>(), N, H, p.feed, gi_.data(), /*accumulate=*/true);
  auto new_hidden = at::empty({L, N, H});
  const float* x = nullptr;  // the layer's input [N, H], from the second layer on
  for (int64_t l = 0; l < L; ++l) {
    const float* h = hidden.data_ptr<float>() + l * N * H;
    float* h_out = new_hidden.data_ptr<float>() + l * N * H;
    if (l > 0) affine(x, N, H, p.w_ih[l], p.b_ih[l], gi_.data());
    affine(h, N, H, p.w_hh[l], p.b_hh[l], gh_.data());
    gru_gates(gi_.data(), gh_.data(), h, h_out, N, H);
    x = h_out;
  }
  const float* top = x;  // [N, H]

  // Scores, masked softmax and context: the query half of the score's linear layer (the key
  // half and its bias are in the keys).
  product(top, N, H, p.query, query_.data(), /*accumulate=*/false);
  auto weights = at::zeros({N, S});
  const float *K = keys.data_ptr<float>(), *M = memory.data_ptr<float>(),
              *v = p.v.data_ptr<float>();
  const bool* keep = mask.defined() ? mask.data_ptr<bool>() : nullptr;
  float* W = weights.data_ptr<float>();
  for (int64_t n = 0; n < N; ++n) {
    float* w = W + n * S;  // [S]
    const bool* kept = keep ? keep + n * S : nullptr;
    for (int64_t j = 0; j < S; ++j)
      if (!kept || kept[j]) w[j] = simd::tanh_dot(query_.data() + n * A, K + (n * S + j) * A, v, A);
    float* c = combine_in_.data() + n * (H + Hm);  // [h; context]
    std::copy(top + n * H, top + (n + 1) * H, c);
    float* ctx = c + H;
    std::fill(ctx, ctx + Hm, 0.f);
    // Nothing to attend to: zero weights and context, as the reference.
    if (!masked_softmax_row(w, kept, w, S)) continue;
    for (int64_t j = 0; j < S; ++j)
      if (w[j] != 0.f) simd::axpy(w[j], M + (n * S + j) * Hm, ctx, Hm);
  }

  // feed = tanh(W_c [h; context] + b_c), logits = W_o feed + b_o
  DecoderStepOutputs out;
  out.feed = at::empty({N, 1, H});
  float* f = out.feed.data_ptr<float>();
  affine(combine_in_.data(), N, H + Hm, p.combine, p.b_combine, f);
  simd::tanh_inplace(f, N * H);
  out.logits = at::empty({N, V});
  affine(f, N, H, p.output, p.b_output, out.logits.data_ptr<float>());
  out.hidden = new_hidden;
  out.attention = weights;
  return out;
}

}  // namespace attnkit::kernels
