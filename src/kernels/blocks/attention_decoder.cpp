#include "attnkit/kernels/blocks/attention_decoder.h"

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/record_function.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "../../core/blas.h"
#include "../cpu/row_parts.h"
#include "../cpu/simd.h"
#include "../gemm/packed_gemm.h"
#include "../gemm/products.h"
#include "../ops/softmax_row.h"
#include "gru_rows.h"

namespace attnkit::kernels {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// A weight's leading dimension: its rows may be a column block of a wider matrix.
int64_t ld_of(const at::Tensor& w) { return w.size(1) > 0 ? w.stride(0) : 0; }

// C[m, n] = A[k, m]^T B[k, n]: a weight's gradient summed over k rows (all steps at once).
template <typename T>
void mul_at(const T* a, int64_t lda, const T* b, int64_t ldb, T* c, int64_t m, int64_t n,
            int64_t k) {
  if constexpr (std::is_same_v<T, float>) {
    products::weight_gradient(a, lda, b, ldb, c, m, n, k);
  } else {
    blas::gemm(/*trans_a=*/true, /*trans_b=*/false, static_cast<int>(m), static_cast<int>(n),
               static_cast<int>(k), T(1), a, static_cast<int>(lda), b, static_cast<int>(ldb), T(0),
               c, static_cast<int>(n));
  }
}

using simd::axpy;
using simd::dot_axpy;
using simd::tanh_backward;
using simd::tanh_dot;
using simd::tanh_inplace;

// Sizes of one call, read off the inputs.
struct Dims {
  int64_t B, T, H, A, S, Hm;
  int64_t C() const { return H + Hm; }  // the combine layer's input [h; c]
};

Dims dims_of(const at::Tensor& gates, const at::Tensor& w_query, const at::Tensor& memory) {
  return {gates.size(0),   gates.size(1),  gates.size(2) / 3,
          w_query.size(0), memory.size(1), memory.size(2)};
}

// Which rows run which step. Rows are sorted by length, longest first, so the rows still running
// at step t are the first rows[t], and step t's rows are stored from offset[t] on in the packed
// buffers ([N, ...], N = sum of the lengths), as a PackedSequence stores them: every weight's
// gradient is then one product over exactly the N steps that ran, padding excluded.
struct Schedule {
  std::vector<int64_t> rows, offset;
  int64_t total = 0;
  Schedule(const std::vector<int64_t>& lengths, int64_t T) : rows(T), offset(T) {
    for (int64_t t = 0; t < T; ++t) {
      int64_t r = 0;
      while (r < static_cast<int64_t>(lengths.size()) && lengths[r] > t) ++r;
      rows[t] = r;
      offset[t] = total;
      total += r;
    }
  }
};

// One row's step of the attention backward: through the context, then the softmax, then the
// additive score, as attend_row's forward computed them.
template <typename F>
struct AttentionRow {
  const F* weights;   // [S] the step's attention weights
  const F* dcontext;  // [Hm] dL/dc_t
  const F* memory;    // [S, Hm] the row's source
  const F* keys;      // [S, A]
  const F* query;     // [A]
  const F* v;         // [A]
  int64_t S, A, Hm;
};

// dweights: [S], the gradient the caller gives the weights themselves, or null; da: [S] scratch.
// Accumulates into dmemory [S, Hm], dkeys [S, A], dquery [A] and dv [A].
template <typename F>
void attention_row_backward(const AttentionRow<F>& r, const F* dweights, F* da, F* dmemory,
                            F* dkeys, F* dquery, F* dv) {
  F dot = 0;
  for (int64_t s = 0; s < r.S; ++s) {
    da[s] = dweights ? dweights[s] : F(0);
    if (r.weights[s] == F(0)) continue;  // masked, or underflowed: no gradient either way
    da[s] += dot_axpy<F>(r.dcontext, r.memory + s * r.Hm, r.weights[s], dmemory + s * r.Hm, r.Hm);
    dot += r.weights[s] * da[s];
  }
  for (int64_t s = 0; s < r.S; ++s) {
    const F de = r.weights[s] * (da[s] - dot);
    if (de == F(0)) continue;
    tanh_backward<F>(r.query, r.keys + s * r.A, r.v, de, dquery, dkeys + s * r.A, dv, r.A);
  }
}

// The gradients the time loop leaves at every step that ran (N rows, in the schedule's order),
// the step inputs the forward saved, and the weights they multiplied.
struct StepGradients {
  const at::Tensor &dgh, &dq, &dpre, &dgi;  // [N, 3H], [N, A], [N, H], [N, 3H]
};
struct StepInputs {
  const at::Tensor &hprev, &hc, &fprev;  // [N, H], [N, C] = [h; c], [N, H]
};
struct DecoderWeights {
  const at::Tensor &w_feed, &w_hh, &w_query, &w_combine;
};
struct WeightGradients {
  at::Tensor feed, hh, query, combine;
};

// Every weight's gradient: one product over the N steps that ran.
WeightGradients weight_gradients(const StepGradients& g, const StepInputs& x,
                                 const DecoderWeights& w, const Schedule& plan, int64_t T) {
  const int64_t N = plan.total, H = w.w_hh.size(1), A = w.w_query.size(0);
  const int64_t C = w.w_combine.size(1);
  const bool feeding = w.w_feed.size(1) > 0;
  WeightGradients out{feeding ? at::zeros({3 * H, H}, x.hprev.options()) : at::Tensor(),
                      at::empty_like(w.w_hh), at::empty_like(w.w_query),
                      at::empty_like(w.w_combine)};
  AT_DISPATCH_FLOATING_TYPES(x.hprev.scalar_type(), "attention_decoder_weights", [&] {
    using F = scalar_t;
    mul_at<F>(g.dgh.data_ptr<F>(), 3 * H, x.hprev.data_ptr<F>(), H, out.hh.data_ptr<F>(), 3 * H, H,
              N);
    mul_at<F>(g.dq.data_ptr<F>(), A, x.hc.data_ptr<F>(), C, out.query.data_ptr<F>(), A, H, N);
    mul_at<F>(g.dpre.data_ptr<F>(), H, x.hc.data_ptr<F>(), C, out.combine.data_ptr<F>(), H, C, N);
    // Steps from t = 1 on (step 0's feed is zero) multiply the previous feeds.
    const int64_t first = T > 1 ? plan.offset[1] : N;
    if (feeding && N > first)
      mul_at<F>(g.dgi.data_ptr<F>() + first * 3 * H, 3 * H, x.fprev.data_ptr<F>() + first * H, H,
                out.feed.data_ptr<F>(), 3 * H, H, N - first);
  });
  return out;
}

class AttentionDecoder : public torch::autograd::Function<AttentionDecoder> {
 public:
  // w_feed is [3H, 0] without input feeding; keep is [B, S] bool. order lists the rows longest
  // first (position i is row order[i]) and lengths[i] is the steps row order[i] runs.
  static variable_list forward(AutogradContext* ctx, const at::Tensor& gates, const at::Tensor& h0,
                               const at::Tensor& w_feed, const at::Tensor& w_hh,
                               const at::Tensor& b_hh, const at::Tensor& w_query,
                               const at::Tensor& keys, const at::Tensor& v,
                               const at::Tensor& memory, const at::Tensor& keep,
                               const at::Tensor& w_combine, const at::Tensor& b_combine,
                               std::vector<int64_t> order, std::vector<int64_t> lengths) {
    RECORD_FUNCTION("attnkit::attention_decoder", std::vector<c10::IValue>());
    const Dims d = dims_of(gates, w_query, memory);
    const int64_t B = d.B, T = d.T, H = d.H, A = d.A, S = d.S, Hm = d.Hm, C = d.C();
    const bool feeding = w_feed.size(1) > 0;
    const Schedule plan(lengths, T);
    const int64_t N = plan.total;
    const auto opts = h0.options();
    auto hprev = at::empty({N, H}, opts);     // the state entering each step
    auto fprev = at::empty({N, H}, opts);     // the feed entering each step (0 at t = 0)
    auto hc = at::empty({N, C}, opts);        // [h_t; c_t], the combine layer's input
    auto save = at::empty({N, 4 * H}, opts);  // r, z, n, gh_n of each step
    auto query = at::empty({N, A}, opts);     // W_q h_t
    auto weights = at::empty({N, S}, opts);   // a_t
    auto feed = at::empty({N, H}, opts);      // feed_t
    auto feeds = at::zeros({B, T, H}, opts);  // the outputs, zero past each row's length
    auto weights_out = at::zeros({B, T, S}, opts);
    auto gi = at::empty({B, 3 * H}, opts), gh = at::empty({B, 3 * H}, opts);
    auto h = h0.index_select(0, at::tensor(order, at::kLong));  // [B, H], sorted rows
    AT_DISPATCH_FLOATING_TYPES(h0.scalar_type(), "attention_decoder", [&] {
      using F = scalar_t;
      const F *X = gates.data_ptr<F>(), *Wf = w_feed.data_ptr<F>(), *Whh = w_hh.data_ptr<F>(),
              *Bhh = b_hh.data_ptr<F>(), *Wq = w_query.data_ptr<F>(), *K = keys.data_ptr<F>(),
              *Vv = v.data_ptr<F>(), *M = memory.data_ptr<F>(), *Wc = w_combine.data_ptr<F>(),
              *Bc = b_combine.data_ptr<F>();
      const bool* keep_rows = keep.data_ptr<bool>();
      F *Hp = hprev.data_ptr<F>(), *Fp = fprev.data_ptr<F>(), *HC = hc.data_ptr<F>(),
        *Sv = save.data_ptr<F>(), *Q = query.data_ptr<F>(), *W = weights.data_ptr<F>(),
        *Fd = feed.data_ptr<F>(), *Out = feeds.data_ptr<F>(), *WOut = weights_out.data_ptr<F>(),
        *Gi = gi.data_ptr<F>(), *Gh = gh.data_ptr<F>(), *Hs = h.data_ptr<F>();
      // The weights are packed by the same threads as run the rows (on one, they were 2 % of a
      // training step with the other thread idle).
      const int64_t parts = row_parts(B, 2.0 * N * (7 * H * H + A * H + H * C));
      const packed::PackOptions split{1, parts};
      using Panels = packed::Panels<F>;
      const Panels feed_w = Panels::transposed(Wf, 3 * H, feeding ? H : 0, ld_of(w_feed), split),
                   hh_w = Panels::transposed(Whh, 3 * H, H, H, split),
                   query_w = Panels::transposed(Wq, A, H, H, split),
                   combine_w = Panels::transposed(Wc, H, C, C, split);
      for_each_row_part(parts, [&](RowPart part) {
        const int64_t j = part.first, P = part.stride;
        for (int64_t t = 0; t < T; ++t) {
          const int64_t R = plan.rows[t], o = plan.offset[t], n = part.count(R);
          if (n == 0) break;  // sorted: no later step has rows of this part either
          F *hp = Hp + o * H, *fp = Fp + o * H, *hc_t = HC + o * C, *q = Q + o * A, *w = W + o * S,
            *f = Fd + o * H;
          for (int64_t b = j; b < R; b += P) {
            const int64_t ob = order[b];
            std::copy(Hs + b * H, Hs + (b + 1) * H, hp + b * H);
            std::copy(X + (ob * T + t) * 3 * H, X + (ob * T + t + 1) * 3 * H, Gi + b * 3 * H);
            if (!feeding) continue;
            if (t == 0)
              std::fill(fp + b * H, fp + (b + 1) * H, F(0));
            else  // row b of the previous step's feeds
              std::copy(Fd + (plan.offset[t - 1] + b) * H, Fd + (plan.offset[t - 1] + b + 1) * H,
                        fp + b * H);
          }
          if (feeding && t > 0)
            feed_w.multiply(fp + j * H, n, P * H, Gi + j * 3 * H, P * 3 * H,
                            /*accumulate=*/true);  // [n, 3H]
          hh_w.multiply(hp + j * H, n, P * H, Gh + j * 3 * H, P * 3 * H, /*accumulate=*/false,
                        /*kstride=*/1, /*bias=*/Bhh);  // [n, 3H]
          for (int64_t b = j; b < R; b += P) {
            gru_rows::gates<F>(Gi + b * 3 * H, Gh + b * 3 * H, hp + b * H, Hs + b * H,
                               Sv + (o + b) * 4 * H, H);
            std::copy(Hs + b * H, Hs + (b + 1) * H, hc_t + b * C);
          }
          query_w.multiply(Hs + j * H, n, P * H, q + j * A, P * A, /*accumulate=*/false);  // [n, A]
          for (int64_t b = j; b < R; b += P) {
            const int64_t ob = order[b];
            F *wb = w + b * S, *ctx_b = hc_t + b * C + H;
            const bool* kb = keep_rows + ob * S;
            for (int64_t s = 0; s < S; ++s)
              wb[s] = kb[s] ? tanh_dot<F>(q + b * A, K + (ob * S + s) * A, Vv, A) : F(0);
            std::fill(ctx_b, ctx_b + Hm, F(0));
            if (masked_softmax_row<F>(wb, kb, wb, S))
              for (int64_t s = 0; s < S; ++s)
                if (wb[s] != F(0)) axpy<F>(wb[s], M + (ob * S + s) * Hm, ctx_b, Hm);
            std::copy(wb, wb + S, WOut + (ob * T + t) * S);
          }
          combine_w.multiply(hc_t + j * C, n, P * C, f + j * H, P * H, /*accumulate=*/false,
                             /*kstride=*/1, /*bias=*/Bc);  // [n, H]
          for (int64_t b = j; b < R; b += P) {
            tanh_inplace<F>(f + b * H, H);
            std::copy(f + b * H, f + (b + 1) * H, Out + (order[b] * T + t) * H);
          }
        }
      });
    });
    ctx->save_for_backward({gates, w_feed, w_hh, w_query, keys, v, memory, w_combine, hprev, fprev,
                            hc, save, query, weights, feed});
    ctx->saved_data["order"] = c10::IValue(order);
    ctx->saved_data["lengths"] = c10::IValue(lengths);
    return {feeds, weights_out};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &gates = saved[0], &w_feed = saved[1], &w_hh = saved[2], &w_query = saved[3],
               &keys = saved[4], &v = saved[5], &memory = saved[6], &w_combine = saved[7],
               &hprev = saved[8], &fprev = saved[9], &hc = saved[10], &save = saved[11],
               &query = saved[12], &weights = saved[13], &feed = saved[14];
    const Dims d = dims_of(gates, w_query, memory);
    const int64_t B = d.B, T = d.T, H = d.H, A = d.A, S = d.S, Hm = d.Hm, C = d.C();
    const bool feeding = w_feed.size(1) > 0;
    const auto order = ctx->saved_data["order"].toIntVector();
    const auto lengths = ctx->saved_data["lengths"].toIntVector();  // of the sorted rows
    const Schedule plan(lengths, T);
    const int64_t N = plan.total;
    const auto opts = hprev.options();
    const auto dfeeds = grads[0].defined() ? grads[0].contiguous() : at::zeros({B, T, H}, opts);
    const auto dweights = grads[1].defined() ? grads[1].contiguous() : at::Tensor();
    auto dpre = at::empty({N, H}, opts);           // through the combine layer's tanh
    auto dq = at::zeros({N, A}, opts);             // into W_q h_t
    auto dgi = at::empty({N, 3 * H}, opts);        // into the input projection
    auto dgh = at::empty({N, 3 * H}, opts);        // into the recurrent projection
    auto dgates = at::empty({B, T, 3 * H}, opts);  // written at every step that ran, zeroed after
    auto dkeys = at::zeros_like(keys), dmemory = at::zeros_like(memory);
    auto dv_rows = at::zeros({B, A}, opts);  // v's gradient by row: rows are split between threads
    // Carried back through time. A row's entries stay zero until its last step is reached.
    auto dh = at::zeros({B, H}, opts);          // dL/dh_t
    auto dfeed_next = at::zeros({B, H}, opts);  // dL/dfeed_t through step t + 1's input
    auto dhc = at::empty({B, C}, opts);
    AT_DISPATCH_FLOATING_TYPES(hprev.scalar_type(), "attention_decoder_backward", [&] {
      using F = scalar_t;
      const F *Wf = w_feed.data_ptr<F>(), *Whh = w_hh.data_ptr<F>(), *Wq = w_query.data_ptr<F>(),
              *K = keys.data_ptr<F>(), *Vv = v.data_ptr<F>(), *M = memory.data_ptr<F>(),
              *Wc = w_combine.data_ptr<F>(), *Hp = hprev.data_ptr<F>(), *Sv = save.data_ptr<F>(),
              *Q = query.data_ptr<F>(), *W = weights.data_ptr<F>(), *Fd = feed.data_ptr<F>(),
              *dF = dfeeds.data_ptr<F>();
      const F* dW = dweights.defined() ? dweights.data_ptr<F>() : nullptr;
      F *dP = dpre.data_ptr<F>(), *dQ = dq.data_ptr<F>(), *dGi = dgi.data_ptr<F>(),
        *dGh = dgh.data_ptr<F>(), *dX = dgates.data_ptr<F>(), *dK = dkeys.data_ptr<F>(),
        *dM = dmemory.data_ptr<F>(), *dV = dv_rows.data_ptr<F>(), *dH = dh.data_ptr<F>(),
        *dFn = dfeed_next.data_ptr<F>(), *dHC = dhc.data_ptr<F>();
      const int64_t parts = row_parts(B, 2.0 * N * (7 * H * H + A * H + H * C));
      const packed::PackOptions split{1, parts};
      using Panels = packed::Panels<F>;
      const Panels feed_w = Panels::plain(Wf, 3 * H, feeding ? H : 0, ld_of(w_feed), split),
                   hh_w = Panels::plain(Whh, 3 * H, H, H, split),
                   query_w = Panels::plain(Wq, A, H, H, split),
                   combine_w = Panels::plain(Wc, H, C, C, split);
      for_each_row_part(parts, [&](RowPart part) {
        const int64_t j = part.first, P = part.stride;
        std::vector<F> da(S);
        for (int64_t t = T - 1; t >= 0; --t) {
          const int64_t R = plan.rows[t], o = plan.offset[t], n = part.count(R);
          if (n == 0) continue;
          const F *f = Fd + o * H, *w = W + o * S, *q = Q + o * A;
          F *dp = dP + o * H, *dq_t = dQ + o * A;
          for (int64_t b = j; b < R; b += P) {
            const F* dfb = dF + (order[b] * T + t) * H;
            for (int64_t i = 0; i < H; ++i) {
              const F fi = f[b * H + i];
              dp[b * H + i] = (dfb[i] + dFn[b * H + i]) * (F(1) - fi * fi);
            }
          }
          combine_w.multiply(dp + j * H, n, P * H, dHC + j * C, P * C,
                             /*accumulate=*/false);  // d[h_t; c_t]
          for (int64_t b = j; b < R; b += P) {
            const int64_t ob = order[b];
            for (int64_t i = 0; i < H; ++i) dH[b * H + i] += dHC[b * C + i];
            attention_row_backward<F>({w + b * S, dHC + b * C + H, M + ob * S * Hm, K + ob * S * A,
                                       q + b * A, Vv, S, A, Hm},
                                      dW ? dW + (ob * T + t) * S : nullptr, da.data(),
                                      dM + ob * S * Hm, dK + ob * S * A, dq_t + b * A, dV + b * A);
          }
          query_w.multiply(dq_t + j * A, n, P * A, dH + j * H, P * H,
                           /*accumulate=*/true);  // += dq W_q
          for (int64_t b = j; b < R; b += P) {    // dH becomes the part of dL/dh_{t-1} outside W_hh
            gru_rows::gates_backward_row<F>(Sv + (o + b) * 4 * H, Hp + (o + b) * H, dH + b * H,
                                            dGi + (o + b) * 3 * H, dGh + (o + b) * 3 * H,
                                            dH + b * H, H);
            std::copy(dGi + (o + b) * 3 * H, dGi + (o + b + 1) * 3 * H,
                      dX + (order[b] * T + t) * 3 * H);
          }
          hh_w.multiply(dGh + (o + j) * 3 * H, n, P * 3 * H, dH + j * H, P * H,
                        /*accumulate=*/true);
          if (feeding && t > 0)
            feed_w.multiply(dGi + (o + j) * 3 * H, n, P * 3 * H, dFn + j * H, P * H,
                            /*accumulate=*/false);
        }
      });
      for (int64_t b = 0; b < B; ++b)  // the steps past each row's length
        std::fill(dX + (order[b] * T + lengths[b]) * 3 * H, dX + (order[b] + 1) * T * 3 * H, F(0));
    });
    auto dw = weight_gradients({dgh, dq, dpre, dgi}, {hprev, hc, fprev},
                               {w_feed, w_hh, w_query, w_combine}, plan, T);
    auto dh0 = at::empty_like(dh);  // back to the callers' row order
    dh0.index_copy_(0, at::tensor(order, at::kLong), dh);
    using products::column_sums;
    return {dgates,           dh0,          dw.feed,    dw.hh,
            column_sums(dgh), dw.query,     dkeys,      column_sums(dv_rows),
            dmemory,          at::Tensor(), dw.combine, column_sums(dpre),
            at::Tensor(),     at::Tensor()};
  }
};

}  // namespace

AttentionDecoderOutputs attention_decoder(const AttentionDecoderInputs& in) {
  TORCH_CHECK(in.gates.dim() == 3 && in.gates.size(2) % 3 == 0,
              "attention_decoder: gates must be [B, T, 3H], got ", in.gates.sizes());
  const int64_t B = in.gates.size(0), H = in.gates.size(2) / 3;
  TORCH_CHECK(in.h0.dim() == 2 && in.h0.size(0) == B && in.h0.size(1) == H,
              "attention_decoder: h0 must be [B, H] = [", B, ", ", H, "], got ", in.h0.sizes());
  TORCH_CHECK(in.memory.dim() == 3 && in.memory.size(0) == B,
              "attention_decoder: memory must be [B, S, Hm] with B = ", B, ", got ",
              in.memory.sizes());
  const int64_t S = in.memory.size(1), Hm = in.memory.size(2);
  TORCH_CHECK(in.w_query.dim() == 2 && in.w_query.size(1) == H,
              "attention_decoder: w_query must be [A, H] with H = ", H, ", got ",
              in.w_query.sizes());
  const int64_t A = in.w_query.size(0);
  TORCH_CHECK(
      in.keys.dim() == 3 && in.keys.size(0) == B && in.keys.size(1) == S && in.keys.size(2) == A,
      "attention_decoder: keys must be [B, S, A] = [", B, ", ", S, ", ", A, "], got ",
      in.keys.sizes());
  auto expect = [&](const at::Tensor& t, std::vector<int64_t> shape, const char* name) {
    TORCH_CHECK(t.sizes() == at::IntArrayRef(shape), "attention_decoder: ", name, " must be ",
                at::IntArrayRef(shape), ", got ", t.sizes());
  };
  expect(in.w_hh, {3 * H, H}, "w_hh");
  expect(in.b_hh, {3 * H}, "b_hh");
  expect(in.w_combine, {H, H + Hm}, "w_combine");
  expect(in.b_combine, {H}, "b_combine");
  if (in.w_feed.defined()) expect(in.w_feed, {3 * H, H}, "w_feed");
  if (in.v.defined())
    TORCH_CHECK(in.v.numel() == A, "attention_decoder: v must have A = ", A, " elements, got ",
                in.v.sizes());
  const auto type = in.h0.scalar_type();
  TORCH_CHECK(type == at::kFloat || type == at::kDouble,
              "attention_decoder: float32 or float64 only, got ", type);
  for (const auto* t : {&in.gates, &in.w_hh, &in.b_hh, &in.w_query, &in.keys, &in.memory,
                        &in.w_combine, &in.b_combine})
    TORCH_CHECK(t->scalar_type() == type && t->device().is_cpu(),
                "attention_decoder: every input must be a CPU tensor of h0's type (", type, ")");
  auto contiguous = [&](const at::Tensor& t) { return t.to(type).contiguous(); };
  // W_ih's feed columns come as a view of W_ih (kernels::split_columns): the packing reads its
  // rows where they lie (leading dimension stride(0)) instead of copying them.
  const auto w_feed = !in.w_feed.defined()       ? at::empty({3 * H, 0}, in.h0.options())
                      : in.w_feed.stride(1) == 1 ? in.w_feed
                                                 : contiguous(in.w_feed);
  const auto v = in.v.defined() ? contiguous(in.v.reshape({-1})) : at::ones({A}, in.h0.options());
  at::Tensor keep = at::ones({B, S}, in.h0.options().dtype(at::kBool));
  if (in.keep.defined()) {  // a padding mask [B, 1, S] as attnkit::padding_mask makes, or [B, S]
    auto k = in.keep.dim() == 3 && in.keep.size(1) == 1 ? in.keep.select(1, 0) : in.keep;
    TORCH_CHECK(k.dim() <= 2, "attention_decoder: keep must broadcast to [B, S] = [", B, ", ", S,
                "], got ", in.keep.sizes());
    keep = k.to(at::kBool).expand({B, S}).contiguous();
  }
  const int64_t T = in.gates.size(1);
  std::vector<int64_t> steps(B, T);
  if (in.lengths.defined()) {
    TORCH_CHECK(in.lengths.dim() == 1 && in.lengths.size(0) == B,
                "attention_decoder: lengths must be [B] = [", B, "], got ", in.lengths.sizes());
    auto len = in.lengths.to(at::kCPU).to(at::kLong).contiguous();
    steps.assign(len.data_ptr<int64_t>(), len.data_ptr<int64_t>() + B);
    for (int64_t n : steps)
      TORCH_CHECK(n >= 0 && n <= T, "attention_decoder: lengths must lie in [0, T = ", T, "], got ",
                  n);
  }
  // Longest first, ties in row order (deterministic): the running rows are always a prefix.
  std::vector<int64_t> order(B);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return steps[a] > steps[b]; });
  std::vector<int64_t> sorted_steps(B);
  for (int64_t i = 0; i < B; ++i) sorted_steps[i] = steps[order[i]];
  auto out = AttentionDecoder::apply(
      contiguous(in.gates), contiguous(in.h0), w_feed, contiguous(in.w_hh), contiguous(in.b_hh),
      contiguous(in.w_query), contiguous(in.keys), v, contiguous(in.memory), keep,
      contiguous(in.w_combine), contiguous(in.b_combine), order, sorted_steps);
  return {out[0], out[1]};
}

}  // namespace attnkit::kernels
