#include "attnkit/kernels/fused_attention.h"

#include "packed_gemm.h"
#include "simd.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
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

void forward_kernel(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                    const MaskView& mask, float scale, at::Tensor& out, at::Tensor& lse) {
  const int64_t N = q.size(0), Tq = q.size(1), Tk = k.size(1);
  const int d = static_cast<int>(q.size(2)), dv = static_cast<int>(v.size(2));
  const float *Q = q.data_ptr<float>(), *K = k.data_ptr<float>(), *V = v.data_ptr<float>();
  float *O = out.data_ptr<float>(), *L = lse.data_ptr<float>();
  // One task per (batch x head) row, whose K and V are packed once for all its query blocks.
  at::parallel_for(0, N, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> s(kBlockQ * kBlockK), p(kBlockQ * kBlockK), acc(kBlockQ * dv), m(kBlockQ),
        l(kBlockQ);
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
  // One thread per (batch x head) row: each owns its dK and dV, so no two threads write one block.
  at::parallel_for(0, N, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> s(kBlockQ * kBlockK), dp(kBlockQ * kBlockK), D(Tq);
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
