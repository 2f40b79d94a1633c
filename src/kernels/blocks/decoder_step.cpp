#include "attnkit/kernels/blocks/decoder_step.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "../cpu/row_parts.h"
#include "../cpu/simd.h"
#include "../ops/softmax_row.h"
#include "attnkit/kernels/blocks/gru.h"
#include "attnkit/kernels/gemm/packed_linear.h"

namespace attnkit::kernels {
namespace {

// A weight as the step reads it: no copy, so a search over one short sentence does not pay for
// copying the column blocks (the query half of the score, the feed's part of W_ih) it views.
at::Tensor frozen(const at::Tensor& t) {
  if (!t.defined()) return t;
  auto w = t.detach();
  return w.dim() == 2 && w.stride(1) == 1 ? w : w.contiguous();
}

// A weight [out, in] packed, and its [out] bias or none.
PackedLinear pack_for_step(ComputeType type, const at::Tensor& w, const at::Tensor& b = {}) {
  return w.defined() ? PackedLinear(frozen(w), frozen(b), type) : PackedLinear();
}

// y[rows, out] = x W^T + b (+ y when accumulate) on the packed panels, whatever the rows: one to
// three rows take the wide blocks, and rows split between threads when there are enough of them
// (a step at batch 1 stays on its thread: splitting its columns cost more than it gave). One GEMV
// per row through BLAS was as fast only on OpenBLAS's best kernels: greedy decoding at batch 1
// ran 0.36x as fast where OpenBLAS picked its SSE3 ones (OPENBLAS_CORETYPE=Prescott on Zen 5).
void product(const float* x, int64_t rows, const PackedLinear& w, float* y,
             bool accumulate = false) {
  w.apply(x, rows, /*ldx=*/w.in(), y, /*ldy=*/w.out(), accumulate,
          row_parts(rows, 2.0 * rows * w.in() * w.out()));
}

}  // namespace

struct PackedDecoderWeights::Impl {
  at::Tensor table;                      // [V, 3H]
  PackedLinear feed;                     // [3H, H], or empty
  std::vector<PackedLinear> w_ih, w_hh;  // per layer (w_ih from the second layer on), with biases
  PackedLinear query;                    // [A, H]
  at::Tensor v;                          // [A]
  PackedLinear combine, output;          // [H, H + Hm], [V, H], with biases
  PackedLinear key;                      // [A, Hm] with its bias, or empty
  int64_t hidden = 0;
};

PackedDecoderWeights::PackedDecoderWeights(const DecoderStepWeights& w, ComputeType type) {
  TORCH_CHECK(w.w_hh.size() == w.b_hh.size() && w.w_hh.size() == w.w_ih.size() &&
                  w.w_hh.size() == w.b_ih.size() && !w.w_hh.empty(),
              "DecoderStep: every GRU layer needs w_ih, w_hh, b_ih and b_hh");
  auto p = std::make_unique<Impl>();
  p->table = w.table.detach().contiguous();
  p->feed = pack_for_step(type, w.w_feed);
  for (size_t l = 0; l < w.w_hh.size(); ++l) {
    p->w_ih.push_back(l > 0 ? pack_for_step(type, w.w_ih[l], w.b_ih[l]) : PackedLinear());
    p->w_hh.push_back(pack_for_step(type, w.w_hh[l], w.b_hh[l]));
  }
  p->query = pack_for_step(type, w.w_query);
  p->v = frozen(w.v);
  p->combine = pack_for_step(type, w.w_combine, w.b_combine);
  p->output = pack_for_step(type, w.w_output, w.b_output);
  p->key = pack_for_step(type, w.w_key, w.b_key);
  p->hidden = w.w_hh[0].size(1);
  impl_ = std::move(p);
}

at::Tensor PackedDecoderWeights::project_keys(const at::Tensor& memory) const {
  TORCH_CHECK(impl_->key.defined(), "DecoderStep: these weights were packed without w_key");
  return impl_->key(memory);
}

PackedDecoderWeights::~PackedDecoderWeights() = default;

DecoderStep::DecoderStep(std::shared_ptr<const PackedDecoderWeights> weights)
    : weights_(std::move(weights)) {}

namespace {

using Impl = PackedDecoderWeights::Impl;

// The GRU layers' new state [L, N, H] from `hidden` [L, N, H]. The first layer's input is
// [embedding; feed]: its embedding part (with the bias) comes from the table, and only the feed
// goes through a product. gi and gh hold [N, 3H] each.
at::Tensor gru_layers(const Impl& p, const at::Tensor& tokens, const at::Tensor& feed,
                      const at::Tensor& hidden, std::vector<float>& gi, std::vector<float>& gh) {
  const int64_t N = tokens.size(0), L = static_cast<int64_t>(p.w_hh.size()), H = p.hidden;
  const int64_t* tok = tokens.data_ptr<int64_t>();
  const float* table = p.table.data_ptr<float>();
  for (int64_t n = 0; n < N; ++n) {
    TORCH_CHECK(tok[n] >= 0 && tok[n] < p.table.size(0), "DecoderStep: token id ", tok[n],
                " is outside the target vocabulary");
    std::copy(table + tok[n] * 3 * H, table + (tok[n] + 1) * 3 * H, gi.data() + n * 3 * H);
  }
  const auto feed_in = p.feed.defined() ? feed.contiguous() : at::Tensor();
  if (feed_in.defined())
    product(feed_in.data_ptr<float>(), N, p.feed, gi.data(), /*accumulate=*/true);
  auto new_hidden = at::empty({L, N, H});
  const float* x = nullptr;  // the layer's input [N, H], from the second layer on
  for (int64_t l = 0; l < L; ++l) {
    const float* h = hidden.data_ptr<float>() + l * N * H;
    float* h_out = new_hidden.data_ptr<float>() + l * N * H;
    if (l > 0) product(x, N, p.w_ih[l], gi.data());
    product(h, N, p.w_hh[l], gh.data());
    // Two sigmoids and a tanh per hidden unit: about 12 elements' worth of work each.
    for_each_row_block(N, 12 * H, [&](int64_t from, int64_t to) {
      gru_gates(gi.data() + from * 3 * H, gh.data() + from * 3 * H, h + from * H, h_out + from * H,
                to - from, H);
    });
    x = h_out;
  }
  return new_hidden;
}

// What the rows attend with: their queries [N, A] (the query half of the score's linear layer;
// the key half and its bias are in the keys), the sources' keys [B, S, A], memory [B, S, Hm] and
// mask [B, 1, S] (or none), and each row's source (or none: row n reads source n).
struct AttendInputs {
  const float* query;
  const at::Tensor &keys, &memory, &mask;
  const int64_t* source_row;
};

// Scores, masked softmax and context per row: weights [N, S], and combine_in [N, H + Hm] =
// [top; context]. A row's scores, weights and context read that row only: whole rows go to the
// kernels' threads (in a beam search at batch 32 this loop was the step's largest part on one
// core).
void attend_rows(const Impl& p, const AttendInputs& in, const float* top, int64_t N,
                 at::Tensor& weights, std::vector<float>& combine_in) {
  const int64_t H = p.hidden, A = p.query.out(), S = in.memory.size(1), Hm = in.memory.size(2);
  const float *K = in.keys.data_ptr<float>(), *M = in.memory.data_ptr<float>(),
              *v = p.v.data_ptr<float>();
  const bool* keep = in.mask.defined() ? in.mask.data_ptr<bool>() : nullptr;
  float* W = weights.data_ptr<float>();
  for_each_row_block(N, S * (3 * A + 2 * Hm), [&](int64_t from, int64_t to) {
    for (int64_t n = from; n < to; ++n) {
      const int64_t b = in.source_row ? in.source_row[n] : n;  // the row's source
      float* w = W + n * S;                                    // [S]
      const bool* kept = keep ? keep + b * S : nullptr;
      for (int64_t j = 0; j < S; ++j)
        if (!kept || kept[j]) w[j] = simd::tanh_dot(in.query + n * A, K + (b * S + j) * A, v, A);
      float* c = combine_in.data() + n * (H + Hm);  // [h; context]
      std::copy(top + n * H, top + (n + 1) * H, c);
      float* ctx = c + H;
      std::fill(ctx, ctx + Hm, 0.f);
      // Nothing to attend to: zero weights and context, as the reference.
      if (!masked_softmax_row(w, kept, w, S)) continue;
      for (int64_t j = 0; j < S; ++j)
        if (w[j] != 0.f) simd::axpy(w[j], M + (b * S + j) * Hm, ctx, Hm);
    }
  });
}

}  // namespace

DecoderStepOutputs DecoderStep::operator()(const DecoderStepInputs& in) {
  const auto& p = weights_->impl();
  const auto tokens = in.tokens.to(at::kLong).contiguous();
  const int64_t N = tokens.size(0), L = static_cast<int64_t>(p.w_hh.size());
  const int64_t H = p.hidden, A = p.query.out(), V = p.output.out();
  const int64_t B = in.memory.size(0), S = in.memory.size(1), Hm = in.memory.size(2);
  TORCH_CHECK(in.hidden.size(0) == L && in.hidden.size(1) == N &&
                  (in.source_row.defined() ? in.source_row.numel() == N : B == N) &&
                  in.keys.size(0) == B && in.keys.size(2) == A,
              "DecoderStep: the state's rows do not match the ", N, " tokens");
  const auto source_row =
      in.source_row.defined() ? in.source_row.to(at::kLong).contiguous() : at::Tensor();
  const int64_t* src = source_row.defined() ? source_row.data_ptr<int64_t>() : nullptr;
  for (int64_t n = 0; src && n < N; ++n)
    TORCH_CHECK(src[n] >= 0 && src[n] < B, "DecoderStep: source row ", src[n], " of ", B);
  const auto memory = in.memory.contiguous(), keys = in.keys.contiguous();
  const auto mask = in.mask.defined() ? in.mask.expand({B, 1, S}).contiguous() : at::Tensor();
  const auto hidden = in.hidden.contiguous();
  gi_.resize(N * 3 * H);
  gh_.resize(N * 3 * H);
  query_.resize(N * A);
  combine_in_.resize(N * (H + Hm));

  auto new_hidden = gru_layers(p, tokens, in.feed, hidden, gi_, gh_);
  const float* top = new_hidden.data_ptr<float>() + (L - 1) * N * H;  // [N, H]
  product(top, N, p.query, query_.data());
  auto weights = at::zeros({N, S});
  attend_rows(p, {query_.data(), keys, memory, mask, src}, top, N, weights, combine_in_);

  // feed = tanh(W_c [h; context] + b_c), logits = W_o feed + b_o
  DecoderStepOutputs out;
  out.feed = at::empty({N, 1, H});
  float* f = out.feed.data_ptr<float>();
  product(combine_in_.data(), N, p.combine, f);
  for_each_range(
      N * H, [&](int64_t from, int64_t to) { simd::tanh_inplace(f + from, to - from); },
      /*per_index=*/4);
  out.logits = at::empty({N, V});
  product(f, N, p.output, out.logits.data_ptr<float>());
  out.hidden = new_hidden;
  out.attention = weights;
  return out;
}

}  // namespace attnkit::kernels
