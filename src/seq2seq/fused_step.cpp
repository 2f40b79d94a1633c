#include "attnkit/seq2seq/fused_step.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <mutex>

#include "../kernels/blas.h"
#include "../kernels/simd.h"
#include "../kernels/softmax_row.h"
#include "attnkit/kernels/gru.h"

namespace attnkit::seq2seq {
namespace {

// A weight as the step reads it: no copy, so a search over one short sentence does not pay for
// copying the column blocks (the query half of the score, the feed's part of W_ih) it views.
at::Tensor frozen(const at::Tensor& t) {
  auto w = t.detach();
  return w.dim() == 2 && w.stride(1) == 1 ? w : w.contiguous();
}

// y[rows, out] = x W^T (+ y when accumulate), W's rows as far apart as it keeps them
// (column blocks of a wider weight are read in place).
void product(const float* x, int64_t rows, int64_t in, const at::Tensor& w, float* y,
             bool accumulate) {
  kernels::blas::linear(x, static_cast<int>(rows), static_cast<int>(in), w.data_ptr<float>(),
                        static_cast<int>(w.size(0)), y, accumulate, 0, 0,
                        static_cast<int>(w.stride(0)));
}

// y[rows, out] = bias + x W^T
void affine(const float* x, int64_t rows, int64_t in, const at::Tensor& w, const at::Tensor& b,
            float* y) {
  kernels::blas::affine(x, static_cast<int>(rows), static_cast<int>(in), w.data_ptr<float>(),
                        static_cast<int>(w.size(0)), b.data_ptr<float>(), y,
                        static_cast<int>(w.stride(0)));
}

// Every target embedding through the first GRU layer's input weights, with its bias:
// [V, 3H] = embedding W_ih[:, :E]^T + b_ih, so a step looks its tokens' part up instead of
// multiplying it (E of the layer's E + H inputs with input feeding). Building it costs as much as
// ~2800 row-steps, more than a batch decodes, so it is kept per decoder, across searches and
// threads, and rebuilt when training or loading changes either weight.
at::Tensor embedding_projection(const Decoder& d) {
  struct Entry {
    std::weak_ptr<DecoderImpl> decoder;
    const void *embedding, *w_ih;
    int64_t embedding_version, w_ih_version;
    at::Tensor table;
  };
  static std::mutex mutex;
  static std::vector<Entry> cache;
  const auto& embedding = d->embedding->weight;
  const auto weights = d->gru->all_weights();
  const auto &w_ih = weights[0], &b_ih = weights[2];
  const int64_t E = embedding.size(1);
  std::lock_guard<std::mutex> lock(mutex);
  cache.erase(std::remove_if(cache.begin(), cache.end(),
                             [](const Entry& e) { return e.decoder.expired(); }),
              cache.end());
  Entry current{
      d.ptr(), embedding.data_ptr(), w_ih.data_ptr(), embedding._version(), w_ih._version(), {}};
  auto same_weights = [&](const Entry& e) {
    return e.embedding == current.embedding && e.w_ih == current.w_ih &&
           e.embedding_version == current.embedding_version &&
           e.w_ih_version == current.w_ih_version;
  };
  auto it = std::find_if(cache.begin(), cache.end(),
                         [&](const Entry& e) { return e.decoder.lock() == d.ptr(); });
  if (it != cache.end() && same_weights(*it)) return it->table;
  current.table = at::addmm(b_ih.detach(), embedding.detach(), w_ih.detach().narrow(1, 0, E).t())
                      .contiguous();  // [V, 3H]
  if (it != cache.end())
    *it = current;  // the weights changed: this decoder's one entry is replaced
  else
    cache.push_back(current);
  return current.table;
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
  embedding_projection_ = embedding_projection(d);
  const auto weights = d->gru->all_weights();
  for (int64_t l = 0; l < options_.layers(); ++l)
    layers_.push_back({frozen(weights[4 * l]), frozen(weights[4 * l + 1]),
                       frozen(weights[4 * l + 2]), frozen(weights[4 * l + 3])});
  if (options_.input_feeding())  // the feed's columns of W_ih, the rest being in the table
    feed_w_ih_ = frozen(layers_[0].w_ih.narrow(1, options_.embed_size(), options_.hidden_size()));
  const auto& score = d->attention->score;
  w_query_ = frozen(score->query_weight());
  v_ = score->v ? frozen(score->v->weight.reshape({-1})) : at::ones({w_query_.size(0)});
  w_combine_ = frozen(d->combine->weight);
  b_combine_ = frozen(d->combine->bias);
  w_output_ = frozen(d->output->weight);
  b_output_ = frozen(d->output->bias);
}

StepOutput FusedStep::step(const at::Tensor& tokens_in, DecoderState& s) {
  const auto tokens = tokens_in.to(at::kLong).contiguous();
  const int64_t N = tokens.size(0), H = options_.hidden_size();
  const int64_t S = s.memory.size(1), Hm = s.memory.size(2), A = w_query_.size(0);
  const int64_t V = w_output_.size(0);
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
  const float* table = embedding_projection_.data_ptr<float>();
  for (int64_t n = 0; n < N; ++n) {
    TORCH_CHECK(tok[n] >= 0 && tok[n] < embedding_projection_.size(0), "FusedStep: token id ",
                tok[n], " is outside the target vocabulary");
    std::copy(table + tok[n] * 3 * H, table + (tok[n] + 1) * 3 * H, gi_.data() + n * 3 * H);
  }
  const auto feed_in = options_.input_feeding() ? s.feed.contiguous() : at::Tensor();
  if (feed_in.defined())
    product(feed_in.data_ptr<float>(), N, H, feed_w_ih_, gi_.data(), /*accumulate=*/true);
  auto new_hidden = at::empty({options_.layers(), N, H});
  const float* x = nullptr;  // the layer's input [N, H], from the second layer on
  for (int64_t l = 0; l < options_.layers(); ++l) {
    const auto& w = layers_[l];
    const float* h = hidden.data_ptr<float>() + l * N * H;
    float* h_out = new_hidden.data_ptr<float>() + l * N * H;
    if (l > 0) affine(x, N, H, w.w_ih, w.b_ih, gi_.data());
    affine(h, N, H, w.w_hh, w.b_hh, gh_.data());
    kernels::gru_gates(gi_.data(), gh_.data(), h, h_out, N, H);
    x = h_out;
  }
  const float* top = x;  // [N, H]

  // Scores, masked softmax and context: the query half of the score's linear layer (the key
  // half and its bias are in s.keys).
  product(top, N, H, w_query_, query_.data(), /*accumulate=*/false);
  auto weights = at::zeros({N, S});
  const float *K = keys.data_ptr<float>(), *M = memory.data_ptr<float>(), *v = v_.data_ptr<float>();
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
  affine(combine_in_.data(), N, H + Hm, w_combine_, b_combine_, f);
  kernels::simd::tanh_inplace(f, N * H);
  auto logits = at::empty({N, V});
  affine(f, N, H, w_output_, b_output_, logits.data_ptr<float>());

  s.hidden = new_hidden;
  s.feed = feed;
  StepOutput out;
  out.logits = logits;
  out.feed = feed;
  out.attention = weights;
  return out;
}

}  // namespace attnkit::seq2seq
