#include "attnkit/kernels/blocks/gru.h"

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
#include "../gemm/packed_gemm.h"
#include "../gemm/products.h"
#include "gru_rows.h"

namespace attnkit::kernels {
namespace {

using gru_rows::gates;
using gru_rows::gates_backward_row;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The per-step recurrent product of a sequence: gh = h W_hh^T + b_hh forward (transposed), or
// dh += dgh W_hh backward. From kGemvRows rows on, W_hh is packed once for the sequence and the
// rows are split between threads (row_parts.h); below that, one GEMV per row straight to BLAS,
// as for a single sentence, on the calling thread.
template <typename T>
class Recurrent {
 public:
  Recurrent(const at::Tensor& w_hh, const at::Tensor& b_hh, int64_t batch, bool transposed)
      : w_(w_hh),
        b_(b_hh),
        batch_(batch),
        transposed_(transposed),
        packed_(batch >= blas::kGemvRows) {
    const int64_t G = w_hh.size(0), H = w_hh.size(1);
    const packed::PackOptions split{1, row_parts(batch)};  // as the rows will be
    if (packed_)
      panels_ = transposed ? packed::Panels<T>::transposed(w_hh.data_ptr<T>(), G, H, H, split)
                           : packed::Panels<T>::plain(w_hh.data_ptr<T>(), G, H, H, split);
  }

  // Threads for `steps` steps of this product.
  int64_t parts(int64_t steps) const {
    return packed_ ? row_parts(batch_, 2.0 * batch_ * steps * w_.size(0) * w_.size(1)) : 1;
  }

  // y[rows] (=|+=) x[rows] op(W) (+ b_hh forward); rows ldx and ldy apart.
  void apply(const T* x, int64_t rows, int64_t ldx, T* y, int64_t ldy) const {
    if (rows == 0) return;
    const int64_t G = w_.size(0), H = w_.size(1), out = transposed_ ? G : H;
    if (packed_) {  // forward: b_hh starts the sums; backward: onto dh
      panels_.multiply(x, rows, ldx, y, ldy, /*accumulate=*/!transposed_, /*kstride=*/1,
                       transposed_ ? b_.data_ptr<T>() : nullptr);
      return;
    }
    TORCH_CHECK(ldx == (transposed_ ? H : G) && ldy == out, "Recurrent: unsplit rows are dense");
    if constexpr (std::is_same_v<T, float>) {
      if (transposed_)
        blas::affine(x, static_cast<int>(rows), static_cast<int>(H), w_.data_ptr<float>(),
                     static_cast<int>(G), b_.data_ptr<float>(), y);
      else
        blas::gemm(/*trans_a=*/false, /*trans_b=*/false, static_cast<int>(rows),
                   static_cast<int>(H), static_cast<int>(G), 1.f, x, static_cast<int>(G),
                   w_.data_ptr<float>(), static_cast<int>(H), 1.f, y, static_cast<int>(H));
      return;
    }
    auto o = at::from_blob(y, {rows, out}, w_.options());
    auto in = at::from_blob(const_cast<T*>(x), {rows, transposed_ ? H : G}, w_.options());
    if (transposed_)
      at::addmm_out(o, b_, in, w_.t());
    else
      o.addmm_(in, w_);
  }

 private:
  at::Tensor w_, b_;
  int64_t batch_;
  bool transposed_, packed_;
  packed::Panels<T> panels_;
};

void check_weights(const at::Tensor& h, const at::Tensor& w_hh, const at::Tensor& b_hh,
                   const char* who) {
  const int64_t H = h.size(-1);
  TORCH_CHECK(w_hh.dim() == 2 && w_hh.size(0) == 3 * H && w_hh.size(1) == H, who,
              ": w_hh must be [3H, H] = [", 3 * H, ", ", H, "] for a state of width ", H, ", got ",
              w_hh.sizes());
  TORCH_CHECK(b_hh.dim() == 1 && b_hh.size(0) == 3 * H, who, ": b_hh must be [3H] = [", 3 * H,
              "], got ", b_hh.sizes());
  TORCH_CHECK(w_hh.scalar_type() == h.scalar_type() && b_hh.scalar_type() == h.scalar_type(), who,
              ": weights and state must share one floating type");
}

class GRUCell : public torch::autograd::Function<GRUCell> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& gi, const at::Tensor& h,
                            const at::Tensor& w_hh, const at::Tensor& b_hh) {
    const int64_t N = h.size(0), H = h.size(1);
    auto gh = at::addmm(b_hh, h, w_hh.t());  // [N, 3H]
    auto out = at::empty_like(h);            // [N, H]
    auto save = at::empty({N, 4 * H}, h.options());
    AT_DISPATCH_FLOATING_TYPES(h.scalar_type(), "gru_cell", [&] {
      for (int64_t b = 0; b < N; ++b)
        gates<scalar_t>(gi.data_ptr<scalar_t>() + b * 3 * H, gh.data_ptr<scalar_t>() + b * 3 * H,
                        h.data_ptr<scalar_t>() + b * H, out.data_ptr<scalar_t>() + b * H,
                        save.data_ptr<scalar_t>() + b * 4 * H, H);
    });
    ctx->save_for_backward({h, w_hh, save});
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const auto &h = saved[0], &w_hh = saved[1], &save = saved[2];
    const auto g = grads[0].contiguous();
    const int64_t N = h.size(0), H = h.size(1);
    auto dgi = at::empty({N, 3 * H}, h.options()), dgh = at::empty({N, 3 * H}, h.options());
    auto dh = at::empty_like(h);
    AT_DISPATCH_FLOATING_TYPES(h.scalar_type(), "gru_cell_backward", [&] {
      for (int64_t b = 0; b < N; ++b)
        gates_backward_row<scalar_t>(
            save.data_ptr<scalar_t>() + b * 4 * H, h.data_ptr<scalar_t>() + b * H,
            g.data_ptr<scalar_t>() + b * H, dgi.data_ptr<scalar_t>() + b * 3 * H,
            dgh.data_ptr<scalar_t>() + b * 3 * H, dh.data_ptr<scalar_t>() + b * H, H);
    });
    dh.addmm_(dgh, w_hh);  // [N, H]
    return {dgi, dh, dgh.t().mm(h), dgh.sum(0)};
  }
};

// Rows visited longest first (order[i] is the callers' row at position i, lengths[i] its steps),
// so the rows still running at any step are the first positions and each step's GEMM covers only
// them. Inputs and outputs stay in the callers' row order: no permuted copies of the sequence.
class GRUSequence : public torch::autograd::Function<GRUSequence> {
 public:
  static variable_list forward(AutogradContext* ctx, const at::Tensor& gi, const at::Tensor& h0,
                               const at::Tensor& w_hh, const at::Tensor& b_hh,
                               std::vector<int64_t> order, std::vector<int64_t> lengths,
                               bool reverse) {
    RECORD_FUNCTION("attnkit::gru_sequence", std::vector<c10::IValue>());
    const int64_t B = gi.size(0), T = gi.size(1), H = h0.size(1);
    auto out = at::empty({B, T, H}, h0.options());       // zero where a row does not run
    auto before = at::empty({B, T, H}, h0.options());    // the state entering each step (or 0)
    auto save = at::empty({B, T, 4 * H}, h0.options());  // r, z, n, gh_n per step
    auto gh = at::empty({B, 3 * H}, h0.options());       // [B, 3H], reused every step
    auto h = at::empty({B, H}, h0.options());            // the state, by position
    auto final = at::empty({B, H}, h0.options());
    AT_DISPATCH_FLOATING_TYPES(h0.scalar_type(), "gru_sequence", [&] {
      scalar_t *O = out.data_ptr<scalar_t>(), *P = before.data_ptr<scalar_t>(),
               *S = save.data_ptr<scalar_t>(), *G = gh.data_ptr<scalar_t>(),
               *Hs = h.data_ptr<scalar_t>(), *Fn = final.data_ptr<scalar_t>();
      const scalar_t *I = gi.data_ptr<scalar_t>(), *H0 = h0.data_ptr<scalar_t>();
      const Recurrent<scalar_t> product(w_hh, b_hh, B, /*transposed=*/true);
      for (int64_t b = 0; b < B; ++b)
        std::copy(H0 + order[b] * H, H0 + (order[b] + 1) * H, Hs + b * H);
      for_each_row_part(product.parts(T), [&](RowPart part) {
        const int64_t j = part.first, stride = part.stride;
        for (int64_t s = 0; s < T; ++s) {
          const int64_t t = reverse ? T - 1 - s : s;
          int64_t rows = 0;
          while (rows < B && lengths[rows] > t) ++rows;
          product.apply(Hs + j * H, part.count(rows), stride * H, G + j * 3 * H, stride * 3 * H);
          for (int64_t b = j; b < B; b += stride) {
            const int64_t at_step = order[b] * T + t;
            scalar_t *hb = Hs + b * H, *o = O + at_step * H, *p = P + at_step * H;
            if (b >= rows) {  // zeros: the output, and what the weight gradient multiplies
              std::fill(o, o + H, scalar_t(0));
              std::fill(p, p + H, scalar_t(0));
              continue;
            }
            std::copy(hb, hb + H, p);
            gates<scalar_t>(I + at_step * 3 * H, G + b * 3 * H, hb, hb, S + at_step * 4 * H, H);
            std::copy(hb, hb + H, o);
          }
        }
      });
      for (int64_t b = 0; b < B; ++b) std::copy(Hs + b * H, Hs + (b + 1) * H, Fn + order[b] * H);
    });
    ctx->save_for_backward({w_hh, before, save});
    ctx->saved_data["order"] = c10::IValue(order);
    ctx->saved_data["lengths"] = c10::IValue(lengths);
    ctx->saved_data["reverse"] = reverse;
    return {out, final};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const auto &w_hh = saved[0], &before = saved[1], &save = saved[2];
    const auto order = ctx->saved_data["order"].toIntVector();
    const auto lengths = ctx->saved_data["lengths"].toIntVector();
    const bool reverse = ctx->saved_data["reverse"].toBool();
    const int64_t B = before.size(0), T = before.size(1), H = before.size(2);
    const auto dout = grads[0].defined() ? grads[0].contiguous() : at::zeros_like(before);
    const auto dfinal =
        grads[1].defined() ? grads[1].contiguous() : at::zeros({B, H}, before.options());
    auto dgi = at::empty({B, T, 3 * H}, before.options());  // zero where a row does not run
    auto dgh = at::empty({B, T, 3 * H}, before.options());
    auto dh = at::empty({B, H}, before.options());            // dL/dh, by position
    auto dgh_step = at::empty({B, 3 * H}, before.options());  // this step's dgh, by position
    auto dh0 = at::empty({B, H}, before.options());
    AT_DISPATCH_FLOATING_TYPES(before.scalar_type(), "gru_sequence_backward", [&] {
      const scalar_t *dO = dout.data_ptr<scalar_t>(), *P = before.data_ptr<scalar_t>(),
                     *S = save.data_ptr<scalar_t>(), *dFn = dfinal.data_ptr<scalar_t>();
      scalar_t *dI = dgi.data_ptr<scalar_t>(), *dG = dgh.data_ptr<scalar_t>(),
               *dH = dh.data_ptr<scalar_t>(), *dGs = dgh_step.data_ptr<scalar_t>(),
               *dH0 = dh0.data_ptr<scalar_t>();
      const Recurrent<scalar_t> product(w_hh, at::Tensor(), B, /*transposed=*/false);
      for (int64_t b = 0; b < B; ++b)
        std::copy(dFn + order[b] * H, dFn + (order[b] + 1) * H, dH + b * H);
      for_each_row_part(product.parts(T), [&](RowPart part) {
        const int64_t j = part.first, stride = part.stride;
        std::vector<scalar_t> g(H);
        for (int64_t s = T - 1; s >= 0; --s) {
          const int64_t t = reverse ? T - 1 - s : s;
          int64_t rows = 0;
          while (rows < B && lengths[rows] > t) ++rows;
          for (int64_t b = j; b < B; b += stride) {
            const int64_t at_step = order[b] * T + t;
            scalar_t *di = dI + at_step * 3 * H, *dg = dG + at_step * 3 * H;
            if (b >= rows) {
              std::fill(di, di + 3 * H, scalar_t(0));
              std::fill(dg, dg + 3 * H, scalar_t(0));
              continue;
            }
            for (int64_t i = 0; i < H; ++i) g[i] = dH[b * H + i] + dO[at_step * H + i];
            gates_backward_row<scalar_t>(S + at_step * 4 * H, P + at_step * H, g.data(), di,
                                         dGs + b * 3 * H, dH + b * H, H);
            std::copy(dGs + b * 3 * H, dGs + (b + 1) * 3 * H, dg);
          }
          product.apply(dGs + j * 3 * H, part.count(rows), stride * 3 * H, dH + j * H, stride * H);
        }
      });
      for (int64_t b = 0; b < B; ++b) std::copy(dH + b * H, dH + (b + 1) * H, dH0 + order[b] * H);
    });
    // Steps a row did not run have zero dgh, so every step's weight gradient is one GEMM.
    auto dgh_flat = dgh.view({B * T, 3 * H});
    at::Tensor dw_hh;
    if (before.scalar_type() == at::kFloat) {
      dw_hh = at::empty({3 * H, H}, before.options());
      products::weight_gradient(dgh.data_ptr<float>(), 3 * H, before.data_ptr<float>(), H,
                                dw_hh.data_ptr<float>(), 3 * H, H, B * T);
    } else {
      dw_hh = dgh_flat.t().mm(before.view({B * T, H}));
    }
    return {dgi, dh0, dw_hh, products::column_sums(dgh_flat), {}, {}, {}};
  }
};

}  // namespace

at::Tensor gru_cell(const at::Tensor& gi, const at::Tensor& h, const at::Tensor& w_hh,
                    const at::Tensor& b_hh) {
  TORCH_CHECK(h.dim() == 2, "gru_cell: h must be [N, H], got ", h.sizes());
  TORCH_CHECK(gi.dim() == 2 && gi.size(0) == h.size(0) && gi.size(1) == 3 * h.size(1),
              "gru_cell: gi must be [N, 3H] = [", h.size(0), ", ", 3 * h.size(1), "], got ",
              gi.sizes());
  check_weights(h, w_hh, b_hh, "gru_cell");
  TORCH_CHECK(gi.scalar_type() == h.scalar_type(),
              "gru_cell: gi and h must share one floating type");
  return GRUCell::apply(gi.contiguous(), h.contiguous(), w_hh.contiguous(), b_hh.contiguous());
}

std::tuple<at::Tensor, at::Tensor> gru_sequence(const at::Tensor& gi, const at::Tensor& h0,
                                                const at::Tensor& w_hh, const at::Tensor& b_hh,
                                                const at::Tensor& lengths, bool reverse) {
  TORCH_CHECK(h0.dim() == 2, "gru_sequence: h0 must be [B, H], got ", h0.sizes());
  TORCH_CHECK(gi.dim() == 3 && gi.size(0) == h0.size(0) && gi.size(2) == 3 * h0.size(1),
              "gru_sequence: gi must be [B, T, 3H] with B = ", h0.size(0),
              " and 3H = ", 3 * h0.size(1), ", got ", gi.sizes());
  check_weights(h0, w_hh, b_hh, "gru_sequence");
  TORCH_CHECK(gi.scalar_type() == h0.scalar_type(),
              "gru_sequence: gi and h0 must share one floating type");
  TORCH_CHECK(lengths.dim() == 1 && lengths.size(0) == gi.size(0),
              "gru_sequence: lengths must be [B] = [", gi.size(0), "], got ", lengths.sizes());
  auto len = lengths.to(at::kCPU).to(at::kLong).contiguous();
  TORCH_CHECK(len.numel() == 0 ||
                  (len.min().item<int64_t>() >= 0 && len.max().item<int64_t>() <= gi.size(1)),
              "gru_sequence: lengths must lie in [0, T = ", gi.size(1), "]");
  // Longest first, ties in row order.
  const int64_t B = len.numel();
  const int64_t* L = len.data_ptr<int64_t>();
  std::vector<int64_t> order(B), lens(B);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return L[a] > L[b]; });
  for (int64_t i = 0; i < B; ++i) lens[i] = L[order[i]];
  auto r = GRUSequence::apply(gi.contiguous(), h0.contiguous(), w_hh.contiguous(),
                              b_hh.contiguous(), order, lens, reverse);
  return {r[0], r[1]};
}

void gru_gates(const float* gi, const float* gh, const float* h, float* h_out, int64_t n,
               int64_t hidden) {
  for (int64_t b = 0; b < n; ++b)
    gates<float>(gi + b * 3 * hidden, gh + b * 3 * hidden, h + b * hidden, h_out + b * hidden,
                 nullptr, hidden);
}

}  // namespace attnkit::kernels
