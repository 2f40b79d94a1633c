#include "attnkit/kernels/fused_attention.h"

#include "packed_gemm.h"
#include "row_parts.h"
#include "simd.h"

#include <ATen/ATen.h>
#include <ATen/record_function.h>
#include <immintrin.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace attnkit::kernels {
namespace {

constexpr int kBlockQ = 128, kBlockK = 512;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

using packed::Panels;

using simd::exp_shift;

// The mask as a strided view over [N, Tq, Tk] (broadcast dimensions have stride 0).
struct MaskView {
  const bool* data = nullptr;
  int64_t sn = 0, sq = 0, sk = 1;
  bool keep(int64_t n, int64_t i, int64_t j) const {
    return !data || data[n * sn + i * sq + j * sk];
  }
};

MaskView mask_view(const at::Tensor& mask, int64_t n, int64_t tq, int64_t tk) {
  MaskView v;
  if (!mask.defined()) return v;
  auto m = mask.expand({n, tq, tk});
  v.data = m.data_ptr<bool>();
  v.sn = m.stride(0);
  v.sq = m.stride(1);
  v.sk = m.stride(2);
  return v;
}

// S[bq, bk] = Q_blk (scale K)ᵀ for keys j0.. (`scaled_kt`: scale Kᵀ of this row, packed), with
// masked scores at -inf.
void block_scores(const float* q, const Panels<float>& scaled_kt, int bq, int bk, int d, float* s,
                  const MaskView& mask, int64_t n, int64_t i0, int64_t j0) {
  scaled_kt.multiply_block(q, bq, /*ldx=*/d, s, /*ldy=*/bk, /*accumulate=*/false, /*kstride=*/1,
                           /*k_begin=*/0, /*k_end=*/d, /*col_begin=*/j0, /*col_end=*/j0 + bk);
  if (!mask.data) return;
  for (int i = 0; i < bq; ++i)
    for (int j = 0; j < bk; ++j)
      if (!mask.keep(n, i0 + i, j0 + j)) s[i * bk + j] = kNegInf;
}

// fn(begin, end) over the N (batch x head) rows, split between the kernels' threads (row_parts.h:
// under ThreadPolicy::Kernels, training's, LibTorch's pool has one thread, and at::parallel_for
// ran the whole batch on one core). Each row's work, besides its 4 Tq Tk d products, packs its
// operands: at a Transformer batch's 12 positions that costs as much as the products, so a row
// counts 100 kFLOP more in the split's estimate. Rows are independent: the split changes nothing.
template <typename Fn>
void for_each_rows(int64_t N, int64_t Tq, int64_t Tk, int64_t d, const Fn& fn) {
  const double work = static_cast<double>(N) * (4.0 * Tq * Tk * d + 1e5);
  const int64_t parts = row_parts(N, work);
  for_each_row_part(
      parts, [&](RowPart part) { fn(N * part.first / parts, N * (part.first + 1) / parts); });
}

// ---- short rows: a Transformer batch's sentences ----
//
// Up to kShortKeys keys a row takes dot products and axpys on the rows as they lie, with nothing
// packed. The blocked path packs K and V (and in the backward pass Q and dO too) per row, and at a
// translation batch's 12 positions that packing and the blocks' edges cost more than the products:
// a [256 rows, 12, 64] causal batch took 0.94 ms forward and 4.0 ms forward + backward on one core
// (AMD EPYC Zen 4) against the composite's 0.97 and 4.5; this path takes 0.38 and 1.4. The same
// work (256 x 12 query positions) at 24 keys: 0.92 / 2.2 ms against the blocks' 1.05 / 5.7; at 28
// about even, and from 32 (one whole AVX-512 panel) the blocks win. The scores of a row,
// s_j = scale (q · k_j), are computed by the same function in both passes, so the backward pass
// recomputes the forward's P exactly.
constexpr int64_t kShortKeys = 24;

// s[j] = scale (q · K_j), or -inf where the mask says no, for the Tk keys of query i of row n.
void short_scores(const float* q, const float* K, int64_t Tk, int d, float scale,
                  const MaskView& mask, int64_t n, int64_t i, float* s) {
  for (int64_t j = 0; j < Tk; ++j)
    s[j] = mask.keep(n, i, j) ? scale * simd::dot(q, K + j * d, d) : kNegInf;
}

// One row's forward pass: O [Tq, dv] and the log-sum-exp L [Tq] of Q [Tq, d], K [Tk, d],
// V [Tk, dv].
void short_forward_row(const float* Q, const float* K, const float* V, int64_t Tq, int64_t Tk,
                       int d, int dv, const MaskView& mask, int64_t n, float scale, float* O,
                       float* L) {
  float s[kShortKeys], p[kShortKeys];
  for (int64_t i = 0; i < Tq; ++i) {
    short_scores(Q + i * d, K, Tk, d, scale, mask, n, i, s);
    float* o = O + i * dv;
    std::fill(o, o + dv, 0.f);
    const float m = simd::max_of(s, Tk);
    if (m == kNegInf) {  // nothing to attend to: a zero output
      L[i] = kNegInf;
      continue;
    }
    const float l = exp_shift(s, p, static_cast<int>(Tk), m), inv = 1.f / l;
    for (int64_t j = 0; j < Tk; ++j)  // O_i = sum_j P_ij V_j
      if (p[j] != 0.f) simd::axpy(p[j] * inv, V + j * dv, o, dv);
    L[i] = m + std::log(l);
  }
}

// One row's backward pass, onto dQ, dK and dV (zero on entry):
//   P_ij = exp(s_ij - L_i), dS_ij = P_ij (dO_i · V_j - dO_i · O_i),
//   dQ_i = scale sum_j dS_ij K_j, dK_j = scale sum_i dS_ij Q_i, dV_j = sum_i P_ij dO_i.
void short_backward_row(const float* Q, const float* K, const float* V, const float* O,
                        const float* L, const float* dO, int64_t Tq, int64_t Tk, int d, int dv,
                        const MaskView& mask, int64_t n, float scale, float* dQ, float* dK,
                        float* dV) {
  float s[kShortKeys], p[kShortKeys];
  for (int64_t i = 0; i < Tq; ++i) {
    if (L[i] == kNegInf) continue;  // no key attended: no gradient
    const float *q = Q + i * d, *g = dO + i * dv;
    short_scores(q, K, Tk, d, scale, mask, n, i, s);
    exp_shift(s, p, static_cast<int>(Tk), L[i]);
    const float D = simd::dot(g, O + i * dv, dv);
    for (int64_t j = 0; j < Tk; ++j) {
      if (p[j] == 0.f) continue;
      const float ds = p[j] * (simd::dot(g, V + j * dv, dv) - D);
      simd::axpy(scale * ds, K + j * d, dQ + i * d, d);
      simd::axpy(scale * ds, q, dK + j * d, d);
      simd::axpy(p[j], g, dV + j * dv, dv);
    }
  }
}

void forward_kernel(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                    const MaskView& mask, float scale, at::Tensor& out, at::Tensor& lse) {
  const int64_t N = q.size(0), Tq = q.size(1), Tk = k.size(1);
  const int d = static_cast<int>(q.size(2)), dv = static_cast<int>(v.size(2));
  const float *Q = q.data_ptr<float>(), *K = k.data_ptr<float>(), *V = v.data_ptr<float>();
  float *O = out.data_ptr<float>(), *L = lse.data_ptr<float>();
  if (Tk <= kShortKeys) {
    for_each_rows(N, Tq, Tk, d, [&](int64_t begin, int64_t end) {
      for (int64_t n = begin; n < end; ++n)
        short_forward_row(Q + n * Tq * d, K + n * Tk * d, V + n * Tk * dv, Tq, Tk, d, dv, mask, n,
                          scale, O + n * Tq * dv, L + n * Tq);
    });
    return;
  }
  // One task per (batch x head) row, whose K and V are packed once for all its query blocks.
  // Blocks no larger than the sequences: at 12 positions, 144 floats instead of 64 Ki.
  const int64_t block_q = std::min<int64_t>(kBlockQ, Tq), block_k = std::min<int64_t>(kBlockK, Tk);
  for_each_rows(N, Tq, Tk, d, [&](int64_t begin, int64_t end) {
    std::vector<float> s(block_q * block_k), p(block_q * block_k), acc(block_q * dv), m(block_q),
        l(block_q);
    for (int64_t n = begin; n < end; ++n) {
      const auto scaled_kt = Panels<float>::transposed(K + n * Tk * d, Tk, d, d, {scale});
      const auto vp = Panels<float>::plain(V + n * Tk * dv, Tk, dv, dv);
      for (int64_t i0 = 0; i0 < Tq; i0 += kBlockQ) {
        const int bq = static_cast<int>(std::min<int64_t>(kBlockQ, Tq - i0));
        const float* q_blk = Q + (n * Tq + i0) * d;
        std::fill(m.begin(), m.end(), kNegInf);
        std::fill(l.begin(), l.end(), 0.f);
        std::fill(acc.begin(), acc.begin() + bq * dv, 0.f);
        for (int64_t j0 = 0; j0 < Tk; j0 += kBlockK) {
          const int bk = static_cast<int>(std::min<int64_t>(kBlockK, Tk - j0));
          block_scores(q_blk, scaled_kt, bq, bk, d, s.data(), mask, n, i0, j0);
          for (int i = 0; i < bq; ++i) {
            const float* row = s.data() + i * bk;
            const float m_new = std::max(m[i], simd::max_of(row, bk));
            float* prow = p.data() + i * bk;
            if (m_new == kNegInf) {  // nothing to attend to yet
              std::fill(prow, prow + bk, 0.f);
              continue;
            }
            const float correction = m[i] == kNegInf ? 0.f : std::exp(m[i] - m_new);
            l[i] = l[i] * correction + exp_shift(row, prow, bk, m_new);
            if (correction != 1.f)
              for (int c = 0; c < dv; ++c) acc[i * dv + c] *= correction;
            m[i] = m_new;
          }
          vp.multiply_block(p.data(), bq, /*ldx=*/bk, acc.data(), /*ldy=*/dv, /*accumulate=*/true,
                            /*kstride=*/1, /*k_begin=*/j0, /*k_end=*/j0 + bk, /*col_begin=*/0,
                            /*col_end=*/dv);
        }
        for (int i = 0; i < bq; ++i) {
          float* o = O + (n * Tq + i0 + i) * dv;
          const float inv = l[i] > 0 ? 1.f / l[i] : 0.f;
          for (int c = 0; c < dv; ++c) o[c] = acc[i * dv + c] * inv;
          L[n * Tq + i0 + i] = l[i] > 0 ? m[i] + std::log(l[i]) : kNegInf;
        }
      }
    }
  });
}

void backward_kernel(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                     const MaskView& mask, float scale, const at::Tensor& out,
                     const at::Tensor& lse, const at::Tensor& grad_out, at::Tensor& dq,
                     at::Tensor& dk, at::Tensor& dv_t) {
  const int64_t N = q.size(0), Tq = q.size(1), Tk = k.size(1);
  const int d = static_cast<int>(q.size(2)), dv = static_cast<int>(v.size(2));
  const float *Q = q.data_ptr<float>(), *K = k.data_ptr<float>(), *V = v.data_ptr<float>();
  const float *O = out.data_ptr<float>(), *L = lse.data_ptr<float>(),
              *dO = grad_out.data_ptr<float>();
  float *dQ = dq.data_ptr<float>(), *dK = dk.data_ptr<float>(), *dV = dv_t.data_ptr<float>();
  if (Tk <= kShortKeys) {
    for_each_rows(N, Tq, Tk, d, [&](int64_t begin, int64_t end) {
      for (int64_t n = begin; n < end; ++n)
        short_backward_row(Q + n * Tq * d, K + n * Tk * d, V + n * Tk * dv, O + n * Tq * dv,
                           L + n * Tq, dO + n * Tq * dv, Tq, Tk, d, dv, mask, n, scale,
                           dQ + n * Tq * d, dK + n * Tk * d, dV + n * Tk * dv);
    });
    return;
  }
  // One thread per (batch x head) row: each owns its dK and dV, so no two threads write one block.
  const int64_t block_q = std::min<int64_t>(kBlockQ, Tq), block_k = std::min<int64_t>(kBlockK, Tk);
  for_each_rows(N, Tq, Tk, d, [&](int64_t begin, int64_t end) {
    std::vector<float> s(block_q * block_k), dp(block_q * block_k), D(Tq);
    for (int64_t n = begin; n < end; ++n) {
      for (int64_t i = 0; i < Tq; ++i) {  // D_i = dO_i · O_i
        float acc = 0;
        for (int c = 0; c < dv; ++c) acc += dO[(n * Tq + i) * dv + c] * O[(n * Tq + i) * dv + c];
        D[i] = acc;
      }
      // Each operand packed once for the row, in the layout its product reads, scaled where the
      // product is.
      const float *Kn = K + n * Tk * d, *Vn = V + n * Tk * dv, *Qn = Q + n * Tq * d,
                  *dOn = dO + n * Tq * dv;
      const auto scaled_kt = Panels<float>::transposed(Kn, Tk, d, d, {scale});  // S = Q (s K)ᵀ
      const auto vt = Panels<float>::transposed(Vn, Tk, dv, dv);                // dP = dO Vᵀ
      const auto scaled_k = Panels<float>::plain(Kn, Tk, d, d, {scale});        // dQ = dS (s K)
      const auto scaled_q = Panels<float>::plain(Qn, Tq, d, d, {scale});        // dK = dSᵀ (s Q)
      const auto dop = Panels<float>::plain(dOn, Tq, dv, dv);                   // dV = Pᵀ dO
      for (int64_t j0 = 0; j0 < Tk; j0 += kBlockK) {
        const int bk = static_cast<int>(std::min<int64_t>(kBlockK, Tk - j0));
        for (int64_t i0 = 0; i0 < Tq; i0 += kBlockQ) {
          const int bq = static_cast<int>(std::min<int64_t>(kBlockQ, Tq - i0));
          const float* q_blk = Qn + i0 * d;
          const float* do_blk = dOn + i0 * dv;
          block_scores(q_blk, scaled_kt, bq, bk, d, s.data(), mask, n, i0, j0);
          for (int i = 0; i < bq; ++i) {  // P = exp(S - lse), in place
            const float lse_i = L[n * Tq + i0 + i];
            float* row = s.data() + i * bk;
            if (lse_i == kNegInf)
              std::fill(row, row + bk, 0.f);
            else
              exp_shift(row, row, bk, lse_i);
          }
          // dV += Pᵀ dO (Pᵀ read in place) ; dP = dO Vᵀ
          dop.multiply_block(s.data(), bk, /*ldx=*/1, dV + (n * Tk + j0) * dv, /*ldy=*/dv,
                             /*accumulate=*/true, /*kstride=*/bk, /*k_begin=*/i0,
                             /*k_end=*/i0 + bq, /*col_begin=*/0, /*col_end=*/dv);
          vt.multiply_block(do_blk, bq, /*ldx=*/dv, dp.data(), /*ldy=*/bk, /*accumulate=*/false,
                            /*kstride=*/1, /*k_begin=*/0, /*k_end=*/dv, /*col_begin=*/j0,
                            /*col_end=*/j0 + bk);
          for (int i = 0; i < bq; ++i)  // dS = P ∘ (dP - D)
            for (int j = 0; j < bk; ++j)
              dp[i * bk + j] = s[i * bk + j] * (dp[i * bk + j] - D[i0 + i]);
          // dQ += dS (scale K) ; dK += dSᵀ (scale Q)
          scaled_k.multiply_block(dp.data(), bq, /*ldx=*/bk, dQ + (n * Tq + i0) * d, /*ldy=*/d,
                                  /*accumulate=*/true, /*kstride=*/1, /*k_begin=*/j0,
                                  /*k_end=*/j0 + bk, /*col_begin=*/0, /*col_end=*/d);
          scaled_q.multiply_block(dp.data(), bk, /*ldx=*/1, dK + (n * Tk + j0) * d, /*ldy=*/d,
                                  /*accumulate=*/true, /*kstride=*/bk, /*k_begin=*/i0,
                                  /*k_end=*/i0 + bq, /*col_begin=*/0, /*col_end=*/d);
        }
      }
    }
  });
}

class FusedAttention : public torch::autograd::Function<FusedAttention> {
 public:
  // The mask travels as an optional (an undefined tensor cannot be an autograd input).
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& q,
                            const at::Tensor& k, const at::Tensor& v,
                            c10::optional<at::Tensor> maybe_mask, double scale) {
    RECORD_FUNCTION("attnkit::fused_attention", std::vector<c10::IValue>());
    const at::Tensor mask = maybe_mask.value_or(at::Tensor());
    auto out = at::empty({q.size(0), q.size(1), v.size(2)}, q.options());
    auto lse = at::empty({q.size(0), q.size(1)}, q.options());
    forward_kernel(q, k, v, mask_view(mask, q.size(0), q.size(1), k.size(1)),
                   static_cast<float>(scale), out, lse);
    ctx->save_for_backward({q, k, v, out, lse});
    if (mask.defined()) ctx->saved_data["mask"] = mask;
    ctx->saved_data["scale"] = scale;
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const auto& q = saved[0];
    const auto& k = saved[1];
    const auto& v = saved[2];
    const at::Tensor mask =
        ctx->saved_data.count("mask") ? ctx->saved_data["mask"].toTensor() : at::Tensor();
    const double scale = ctx->saved_data["scale"].toDouble();
    auto dq = at::zeros_like(q), dk = at::zeros_like(k), dv = at::zeros_like(v);
    backward_kernel(q, k, v, mask_view(mask, q.size(0), q.size(1), k.size(1)),
                    static_cast<float>(scale), saved[3], saved[4], grads[0].contiguous(), dq, dk,
                    dv);
    return {dq, dk, dv, at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor fused_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                           const at::Tensor& mask, double scale) {
  TORCH_CHECK(q.dim() == 3 && k.dim() == 3 && v.dim() == 3, "fused_attention: Q ", q.sizes(),
              ", K ", k.sizes(), " and V ", v.sizes(),
              " must be [N, T, d] (fold batch and heads into N)");
  TORCH_CHECK(q.size(0) == k.size(0) && k.size(0) == v.size(0) && q.size(2) == k.size(2) &&
                  k.size(1) == v.size(1),
              "fused_attention: Q ", q.sizes(), ", K ", k.sizes(), " and V ", v.sizes(),
              " disagree (need Q [N, Tq, d], K [N, Tk, d], V [N, Tk, dv])");
  TORCH_CHECK(
      q.scalar_type() == at::kFloat && k.scalar_type() == at::kFloat &&
          v.scalar_type() == at::kFloat,
      "fused_attention: float32 only (use functional::scaled_dot_product_attention otherwise)");
  at::Tensor m;
  if (mask.defined()) {
    TORCH_CHECK(mask.dim() == 3, "fused_attention: the mask must be 3-D, got ", mask.sizes());
    m = mask.to(at::kBool).contiguous();
    m.expand({q.size(0), q.size(1), k.size(1)});  // validates the broadcast
  }
  const double s = scale > 0 ? scale : 1.0 / std::sqrt(static_cast<double>(q.size(2)));
  c10::optional<at::Tensor> maybe_mask;
  if (m.defined()) maybe_mask = m;
  return FusedAttention::apply(q.contiguous(), k.contiguous(), v.contiguous(), maybe_mask, s);
}

}  // namespace attnkit::kernels
