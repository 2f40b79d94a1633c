#include "attnkit/seq2seq/fused_step.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <mutex>

#include "../kernels/blas.h"
#include "../kernels/packed_gemm.h"
#include "../kernels/row_parts.h"
#include "../kernels/simd.h"
#include "../kernels/softmax_row.h"
#include "attnkit/kernels/gru.h"

namespace attnkit::seq2seq {
namespace {

using kernels::packed::Panels;

// A weight as the step reads it: no copy, so a search over one short sentence does not pay for
// copying the column blocks (the query half of the score, the feed's part of W_ih) it views.
at::Tensor frozen(const at::Tensor& t) {
  auto w = t.detach();
  return w.dim() == 2 && w.stride(1) == 1 ? w : w.contiguous();
}

}  // namespace

// A weight, and its packed panels for products of kGemvRows rows or more.
struct FusedStep::Weight {
  at::Tensor w;  // [out, in], rows as far apart as the module keeps them
  Panels<float> panels;
  explicit Weight(const at::Tensor& t = {}) : w(t.defined() ? frozen(t) : t) {
    if (w.defined())
      panels = Panels<float>::transposed(w.data_ptr<float>(), w.size(0), w.size(1), w.stride(0));
  }
};

// What every step multiplies by, prepared once per decoder and set of weights.
struct FusedStep::Prepared {
  // Every target embedding through the first GRU layer's input weights, with its bias:
  // [V, 3H] = embedding W_ih[:, :E]^T + b_ih, so a step looks its tokens' part up instead of
  // multiplying it (E of the layer's E + H inputs with input feeding).
  at::Tensor table;
  Weight feed;                     // [3H, H]: the first layer's input weights for the feed
  std::vector<Weight> w_ih, w_hh;  // per layer (w_ih from the second layer on)
  std::vector<at::Tensor> b_ih, b_hh;
  Weight query;            // [A, H]: the query half of the score's linear layer
  at::Tensor v;            // [A]: Bahdanau's v, or ones for the plain additive sum
  Weight combine, output;  // [H, H + Hm], [V, H]
  at::Tensor b_combine, b_output;
};

namespace {

// y[rows, out] = x W^T (+ y when accumulate): one GEMV per row for a few rows, as BLAS does it
// best; from kGemvRows rows on, the packed panels with rows split between the threads.
void product(const float* x, int64_t rows, int64_t in, const FusedStep::Weight& w, float* y,
             bool accumulate) {
  if (rows < kernels::blas::kGemvRows) {
    kernels::blas::linear(x, static_cast<int>(rows), static_cast<int>(in), w.w.data_ptr<float>(),
                          static_cast<int>(w.w.size(0)), y, accumulate, 0, 0,
                          static_cast<int>(w.w.stride(0)));
    return;
  }
  const int64_t out = w.w.size(0);
  w.panels.multiply_parallel(x, rows, in, y, out, accumulate, 1,
                             kernels::row_parts(rows, 2.0 * rows * in * out));
}

// y[rows, out] = bias + x W^T
void affine(const float* x, int64_t rows, int64_t in, const FusedStep::Weight& w,
            const at::Tensor& b, float* y) {
  const int64_t out = w.w.size(0);
  for (int64_t r = 0; r < rows; ++r)
    std::copy(b.data_ptr<float>(), b.data_ptr<float>() + out, y + r * out);
  product(x, rows, in, w, y, /*accumulate=*/true);
}

std::shared_ptr<const FusedStep::Prepared> prepare(const Decoder& d) {
  auto p = std::make_shared<FusedStep::Prepared>();
  const auto& o = d->options;
  const auto weights = d->gru->all_weights();
  const int64_t E = o.embed_size();
  p->table = at::addmm(weights[2].detach(), d->embedding->weight.detach(),
                       weights[0].detach().narrow(1, 0, E).t())
                 .contiguous();  // [V, 3H]
  if (o.input_feeding())         // the feed's columns of W_ih, the rest being in the table
    p->feed = FusedStep::Weight(weights[0].narrow(1, E, o.hidden_size()));
  for (int64_t l = 0; l < o.layers(); ++l) {
    p->w_ih.emplace_back(l > 0 ? weights[4 * l] : at::Tensor());
    p->w_hh.emplace_back(weights[4 * l + 1]);
    p->b_ih.push_back(frozen(weights[4 * l + 2]));
    p->b_hh.push_back(frozen(weights[4 * l + 3]));
  }
  const auto& score = d->attention->score;
  p->query = FusedStep::Weight(score->query_weight());
  p->v = score->v ? frozen(score->v->weight.reshape({-1})) : at::ones({p->query.w.size(0)});
  p->combine = FusedStep::Weight(d->combine->weight);
  p->b_combine = frozen(d->combine->bias);
  p->output = FusedStep::Weight(d->output->weight);
  p->b_output = frozen(d->output->bias);
  return p;
}

// Building the table and packing the weights costs as much as a few thousand row-steps, more
// than a batch decodes, so it is kept per decoder, across searches and threads, and rebuilt when
// training or loading changes any of its parameters.
std::shared_ptr<const FusedStep::Prepared> prepared(const Decoder& d) {
  struct Entry {
    std::weak_ptr<DecoderImpl> decoder;
    std::vector<std::pair<const void*, uint32_t>> weights;  // each parameter's buffer and version
    std::shared_ptr<const FusedStep::Prepared> prepared;
  };
  static std::mutex mutex;
  static std::vector<Entry> cache;
  Entry current{d.ptr(), {}, nullptr};
  for (const auto& p : d->parameters()) current.weights.emplace_back(p.data_ptr(), p._version());
  std::lock_guard<std::mutex> lock(mutex);
  cache.erase(std::remove_if(cache.begin(), cache.end(),
                             [](const Entry& e) { return e.decoder.expired(); }),
              cache.end());
  auto it = std::find_if(cache.begin(), cache.end(),
                         [&](const Entry& e) { return e.decoder.lock() == d.ptr(); });
  if (it != cache.end() && it->weights == current.weights) return it->prepared;
  current.prepared = prepare(d);
  if (it != cache.end())
    *it = current;  // the weights changed: this decoder's one entry is replaced
  else
    cache.push_back(current);
  return current.prepared;
}

}  // namespace

bool FusedStep::supports(const Decoder& d) {
  const auto& o = d->options;
  if (!o.attention() || o.weighting() != WeightingKind::Soft) return false;
  if (o.score() != ScoreKind::Additive && o.score() != ScoreKind::Bahdanau) return false;
  const auto& score = d->attention->score;
  if (!score->linear || score->linear->options.bias() == false) return false;
  for (const auto& p : d->parameters())
    if (p.scalar_type() != at::kFloat || !p.device().is_cpu()) return false;
  return true;
}

FusedStep::FusedStep(const Decoder& d) : options_(d->options) {
  TORCH_CHECK(supports(d), "FusedStep: this decoder's configuration needs the reference step");
  prepared_ = prepared(d);
}

StepOutput FusedStep::step(const at::Tensor& tokens_in, DecoderState& s) {
  const auto tokens = tokens_in.to(at::kLong).contiguous();
  const int64_t N = tokens.size(0), H = options_.hidden_size();
  const Prepared& p = *prepared_;
  const int64_t S = s.memory.size(1), Hm = s.memory.size(2), A = p.query.w.size(0);
  const int64_t V = p.output.w.size(0);
  TORCH_CHECK(s.hidden.size(1) == N && s.memory.size(0) == N && s.keys.size(2) == A,
              "FusedStep: the state's rows do not match the ", N, " tokens");
  const auto memory = s.memory.contiguous(), keys = s.keys.contiguous();
  const auto mask = s.mask.defined() ? s.mask.expand({N, 1, S}).contiguous() : at::Tensor();
  const auto hidden = s.hidden.contiguous();
  gi_.resize(N * 3 * H);
  gh_.resize(N * 3 * H);
  query_.resize(N * A);
  combine_in_.resize(N * (H + Hm));

  // GRU layers: [L, N, H]. The first layer's input is [embedding; feed]: its embedding part
  // (with the bias) comes from the table, and only the feed goes through a product.
  const int64_t* tok = tokens.data_ptr<int64_t>();
  const float* table = p.table.data_ptr<float>();
  for (int64_t n = 0; n < N; ++n) {
    TORCH_CHECK(tok[n] >= 0 && tok[n] < p.table.size(0), "FusedStep: token id ", tok[n],
                " is outside the target vocabulary");
    std::copy(table + tok[n] * 3 * H, table + (tok[n] + 1) * 3 * H, gi_.data() + n * 3 * H);
  }
  const auto feed_in = options_.input_feeding() ? s.feed.contiguous() : at::Tensor();
  if (feed_in.defined())
    product(feed_in.data_ptr<float>(), N, H, p.feed, gi_.data(), /*accumulate=*/true);
  auto new_hidden = at::empty({options_.layers(), N, H});
  const float* x = nullptr;  // the layer's input [N, H], from the second layer on
  for (int64_t l = 0; l < options_.layers(); ++l) {
    const float* h = hidden.data_ptr<float>() + l * N * H;
    float* h_out = new_hidden.data_ptr<float>() + l * N * H;
    if (l > 0) affine(x, N, H, p.w_ih[l], p.b_ih[l], gi_.data());
    affine(h, N, H, p.w_hh[l], p.b_hh[l], gh_.data());
    kernels::gru_gates(gi_.data(), gh_.data(), h, h_out, N, H);
    x = h_out;
  }
  const float* top = x;  // [N, H]

  // Scores, masked softmax and context: the query half of the score's linear layer (the key
  // half and its bias are in s.keys).
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
      if (!kept || kept[j])
        w[j] = kernels::simd::tanh_dot(query_.data() + n * A, K + (n * S + j) * A, v, A);
    float* c = combine_in_.data() + n * (H + Hm);  // [h; context]
    std::copy(top + n * H, top + (n + 1) * H, c);
    float* ctx = c + H;
    std::fill(ctx, ctx + Hm, 0.f);
    // Nothing to attend to: zero weights and context, as the reference.
    if (!kernels::masked_softmax_row(w, kept, w, S)) continue;
    for (int64_t j = 0; j < S; ++j)
      if (w[j] != 0.f) kernels::simd::axpy(w[j], M + (n * S + j) * Hm, ctx, Hm);
  }

  // feed = tanh(W_c [h; context] + b_c), logits = W_o feed + b_o
  auto feed = at::empty({N, 1, H});
  float* f = feed.data_ptr<float>();
  affine(combine_in_.data(), N, H + Hm, p.combine, p.b_combine, f);
  kernels::simd::tanh_inplace(f, N * H);
  auto logits = at::empty({N, V});
  affine(f, N, H, p.output, p.b_output, logits.data_ptr<float>());

  s.hidden = new_hidden;
  s.feed = feed;
  StepOutput out;
  out.logits = logits;
  out.feed = feed;
  out.attention = weights;
  return out;
}

}  // namespace attnkit::seq2seq
