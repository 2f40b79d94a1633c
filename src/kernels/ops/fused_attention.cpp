#include "attnkit/kernels/ops/fused_attention.h"

#include "../cpu/row_parts.h"
#include "../cpu/simd.h"
#include "../gemm/packed_gemm.h"
#include "attnkit/kernels/cpu/cpu_isa.h"

#include <ATen/ATen.h>
#include <ATen/record_function.h>
#include <immintrin.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

namespace attnkit::kernels {
namespace {

constexpr int kBlockQ = 128, kBlockK = 512;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr double kLog2e = 1.44269504088896340736;

using packed::Panels;

using simd::exp_shift;

// Where one operand's rows lie: row n = b H + h (batch b, head h) has position t's values at
// data + b * batch + h * head + t * ld. fused_attention's [N, T, d] tensors are H = 1 and
// ld = d; fused_multihead_attention reads heads where the projections left them ([B, T, C]: head
// = d, ld = C) and writes its output with the heads side by side, as the out-projection reads it,
// so no head is split or merged in memory, forward or backward.
template <typename T>
struct Rows {
  T* data = nullptr;
  int64_t batch = 0, head = 0, ld = 0;
  T* row(int64_t n, int64_t heads) const { return data + (n / heads) * batch + (n % heads) * head; }
};

// Column `col` of a [B, T, C] tensor, head width `width`.
template <typename T>
Rows<T> rows_of(const at::Tensor& x, int64_t col, int64_t width) {
  return {x.data_ptr<float>() + col, x.size(1) * x.size(2), width, x.size(2)};
}

// The sizes: N = B H rows, Tq queries and Tk keys, head widths d (queries, keys) and dv (values).
struct Sizes {
  int64_t N, heads, Tq, Tk;
  int d, dv;
};

// The mask as a strided view over [B, Tq, Tk] (broadcast dimensions have stride 0); row n reads
// its batch's mask.
struct MaskView {
  const bool* data = nullptr;
  int64_t heads = 1, sn = 0, sq = 0, sk = 1;
  bool keep(int64_t n, int64_t i, int64_t j) const {
    return !data || data[(n / heads) * sn + i * sq + j * sk];
  }
};

MaskView mask_view(const at::Tensor& mask, int64_t batch, int64_t heads, int64_t tq, int64_t tk) {
  MaskView v;
  if (!mask.defined()) return v;
  auto m = mask.expand({batch, tq, tk});
  v.data = m.data_ptr<bool>();
  v.heads = heads;
  v.sn = m.stride(0);
  v.sq = m.stride(1);
  v.sk = m.stride(2);
  return v;
}

// S[bq, bk] = Q_blk (scale K)ᵀ for keys j0.. (`scaled_kt`: scale Kᵀ of this row, packed; Q_blk's
// rows ldq apart), with masked scores at -inf.
void block_scores(const float* q, int64_t ldq, const Panels<float>& scaled_kt, int bq, int bk,
                  int d, float* s, const MaskView& mask, int64_t n, int64_t i0, int64_t j0) {
  scaled_kt.multiply_block(q, bq, /*ldx=*/ldq, s, /*ldy=*/bk, /*accumulate=*/false, /*kstride=*/1,
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
void for_each_rows(const Sizes& z, const Fn& fn) {
  const double work = static_cast<double>(z.N) * (4.0 * z.Tq * z.Tk * z.d + 1e5);
  const int64_t parts = row_parts(z.N, work);
  for_each_row_part(
      parts, [&](RowPart part) { fn(z.N * part.first / parts, z.N * (part.first + 1) / parts); });
}

// ---- short rows: a Transformer batch's sentences ----
//
// Up to kShortKeys keys a row takes dot products and axpys on the rows as they lie, with nothing
// packed: at a translation batch's 12 positions the blocked path's packing and edges cost more
// than its products ([256 rows, 12, 64], causal, one core: 0.38 / 1.4 ms forward / forward +
// backward against the blocks' 0.94 / 4.0; about even at 28 keys; bench `ShortAttention`). Both
// passes compute a row's scores with one function, so the backward pass recomputes P exactly.
constexpr int64_t kShortKeys = 24;

// One row's operands (Rows::row of each).
template <typename T>
struct Row {
  T* data;
  int64_t ld;
  T* at(int64_t t) const { return data + t * ld; }
};
template <typename T>
Row<T> row(const Rows<T>& r, int64_t n, int64_t heads) {
  return {r.row(n, heads), r.ld};
}

// s[j] = scale (q · K_j), or -inf where the mask says no, for the Tk keys of query i of row n.
void short_scores(const float* q, Row<const float> K, int64_t Tk, int d, float scale,
                  const MaskView& mask, int64_t n, int64_t i, float* s) {
  for (int64_t j = 0; j < Tk; ++j)
    s[j] = mask.keep(n, i, j) ? scale * simd::dot(q, K.at(j), d) : kNegInf;
}

// Row n's forward pass: O [Tq, dv] and the log-sum-exp L [Tq] of Q [Tq, d], K [Tk, d],
// V [Tk, dv].
void short_forward_row(const Sizes& z, int64_t n, Row<const float> Q, Row<const float> K,
                       Row<const float> V, const MaskView& mask, float scale, Row<float> O,
                       float* L) {
  float s[kShortKeys], p[kShortKeys];
  for (int64_t i = 0; i < z.Tq; ++i) {
    short_scores(Q.at(i), K, z.Tk, z.d, scale, mask, n, i, s);
    float* o = O.at(i);
    std::fill(o, o + z.dv, 0.f);
    const float m = simd::max_of(s, z.Tk);
    if (m == kNegInf) {  // nothing to attend to: a zero output
      L[i] = kNegInf;
      continue;
    }
    const float l = exp_shift(s, p, static_cast<int>(z.Tk), m), inv = 1.f / l;
    for (int64_t j = 0; j < z.Tk; ++j)  // O_i = sum_j P_ij V_j
      if (p[j] != 0.f) simd::axpy(p[j] * inv, V.at(j), o, z.dv);
    L[i] = m + std::log(l);
  }
}

// Row n's backward pass, onto dQ, dK and dV (zero on entry):
//   P_ij = exp(s_ij - L_i), dS_ij = P_ij (dO_i · V_j - dO_i · O_i),
//   dQ_i = scale sum_j dS_ij K_j, dK_j = scale sum_i dS_ij Q_i, dV_j = sum_i P_ij dO_i.
void short_backward_row(const Sizes& z, int64_t n, Row<const float> Q, Row<const float> K,
                        Row<const float> V, Row<const float> O, const float* L, Row<const float> dO,
                        const MaskView& mask, float scale, Row<float> dQ, Row<float> dK,
                        Row<float> dV) {
  float s[kShortKeys], p[kShortKeys];
  for (int64_t i = 0; i < z.Tq; ++i) {
    if (L[i] == kNegInf) continue;  // no key attended: no gradient
    const float *q = Q.at(i), *g = dO.at(i);
    short_scores(q, K, z.Tk, z.d, scale, mask, n, i, s);
    exp_shift(s, p, static_cast<int>(z.Tk), L[i]);
    const float D = simd::dot(g, O.at(i), z.dv);
    for (int64_t j = 0; j < z.Tk; ++j) {
      if (p[j] == 0.f) continue;
      const float ds = p[j] * (simd::dot(g, V.at(j), z.dv) - D);
      simd::axpy(scale * ds, K.at(j), dQ.at(i), z.d);
      simd::axpy(scale * ds, q, dK.at(j), z.d);
      simd::axpy(p[j], g, dV.at(j), z.dv);
    }
  }
}

// ---- short rows on AVX-512: d = dv = 16 V ----
//
// The portable rows above make five calls per query and key in the backward pass, each loading
// its operands afresh (25 GFLOP/s at a Transformer batch's shape, 7.9 % of a training step).
// Here a query's q (and dO_i) and its sums stay in registers over all its keys: 230 / 730 us
// forward / forward + backward against 350 / 1250 (bench `ShortAttention/fused`, one Zen 5 core).
// Both passes compute the scores with short_scores512, so the backward pass recomputes P
// exactly; dQ_i sums over j in ascending order with fused multiply-adds, the same bits.

template <int V>
__attribute__((target("avx512f,avx2,fma"))) inline void load_row(const float* x, __m512 (&r)[V]) {
#pragma GCC unroll 8
  for (int v = 0; v < V; ++v) r[v] = _mm512_loadu_ps(x + 16 * v);
}

// a · b for a row held in registers: one sum of 16 V products in a fixed order.
template <int V>
__attribute__((target("avx512f,avx2,fma"))) inline float dot_row(const __m512 (&a)[V],
                                                                 const float* b) {
  __m512 acc = _mm512_mul_ps(a[0], _mm512_loadu_ps(b));
#pragma GCC unroll 8
  for (int v = 1; v < V; ++v) acc = _mm512_fmadd_ps(a[v], _mm512_loadu_ps(b + 16 * v), acc);
  return simd::hsum512(acc);
}

// short_scores with q in registers.
template <int V>
__attribute__((target("avx512f,avx2,fma"))) void short_scores512(const __m512 (&q)[V],
                                                                 Row<const float> K, int64_t Tk,
                                                                 float scale, const MaskView& mask,
                                                                 int64_t n, int64_t i, float* s) {
  for (int64_t j = 0; j < Tk; ++j)
    s[j] = mask.keep(n, i, j) ? scale * dot_row<V>(q, K.at(j)) : kNegInf;
}

// short_forward_row on AVX-512: O_i's sums over the even and the odd keys in registers, so two
// chains of multiply-adds overlap.
template <int V>
__attribute__((target("avx512f,avx2,fma"))) void short_forward_row512(
    const Sizes& z, int64_t n, Row<const float> Q, Row<const float> K, Row<const float> Vr,
    const MaskView& mask, float scale, Row<float> O, float* L) {
  float s[kShortKeys];
  for (int64_t i = 0; i < z.Tq; ++i) {
    __m512 q[V], c0[V], c1[V];
    load_row<V>(Q.at(i), q);
    short_scores512<V>(q, K, z.Tk, scale, mask, n, i, s);
    float* o = O.at(i);
    const float m = simd::max_of(s, z.Tk);
    if (m == kNegInf) {  // nothing to attend to: a zero output
      std::fill(o, o + 16 * V, 0.f);
      L[i] = kNegInf;
      continue;
    }
    const float l = exp_shift(s, s, static_cast<int>(z.Tk), m);
#pragma GCC unroll 8
    for (int v = 0; v < V; ++v) c0[v] = c1[v] = _mm512_setzero_ps();
    for (int64_t j = 0; j < z.Tk; ++j) {  // O_i l = sum_j exp(s_ij - m) V_j
      if (s[j] == 0.f) continue;
      const __m512 p = _mm512_set1_ps(s[j]);
      const float* vj = Vr.at(j);
      auto& c = j % 2 ? c1 : c0;
#pragma GCC unroll 8
      for (int v = 0; v < V; ++v) c[v] = _mm512_fmadd_ps(p, _mm512_loadu_ps(vj + 16 * v), c[v]);
    }
    const __m512 inv = _mm512_set1_ps(1.f / l);
#pragma GCC unroll 8
    for (int v = 0; v < V; ++v)
      _mm512_storeu_ps(o + 16 * v, _mm512_mul_ps(_mm512_add_ps(c0[v], c1[v]), inv));
    L[i] = m + std::log(l);
  }
}

// short_backward_row on AVX-512: q, dO_i and dQ_i's sum in registers; each key's K_j and V_j
// read once per query, dK_j and dV_j updated in place.
template <int V>
__attribute__((target("avx512f,avx2,fma"))) void short_backward_row512(
    const Sizes& z, int64_t n, Row<const float> Q, Row<const float> K, Row<const float> Vr,
    Row<const float> O, const float* L, Row<const float> dO, const MaskView& mask, float scale,
    Row<float> dQ, Row<float> dK, Row<float> dV) {
  float p[kShortKeys];
  for (int64_t i = 0; i < z.Tq; ++i) {
    if (L[i] == kNegInf) continue;  // no key attended: no gradient
    __m512 q[V], g[V], dq[V];
    load_row<V>(Q.at(i), q);
    load_row<V>(dO.at(i), g);
    short_scores512<V>(q, K, z.Tk, scale, mask, n, i, p);
    exp_shift(p, p, static_cast<int>(z.Tk), L[i]);
    const float D = dot_row<V>(g, O.at(i));
    float* dqi = dQ.at(i);
    load_row<V>(dqi, dq);
    for (int64_t j = 0; j < z.Tk; ++j) {
      if (p[j] == 0.f) continue;
      const float *kj = K.at(j), *vj = Vr.at(j);
      float *dkj = dK.at(j), *dvj = dV.at(j);
      const float ds = p[j] * (dot_row<V>(g, vj) - D);
      const __m512 a = _mm512_set1_ps(scale * ds), pj = _mm512_set1_ps(p[j]);
#pragma GCC unroll 8
      for (int v = 0; v < V; ++v) {
        dq[v] = _mm512_fmadd_ps(a, _mm512_loadu_ps(kj + 16 * v), dq[v]);
        _mm512_storeu_ps(dkj + 16 * v, _mm512_fmadd_ps(a, q[v], _mm512_loadu_ps(dkj + 16 * v)));
        _mm512_storeu_ps(dvj + 16 * v, _mm512_fmadd_ps(pj, g[v], _mm512_loadu_ps(dvj + 16 * v)));
      }
    }
#pragma GCC unroll 8
    for (int v = 0; v < V; ++v) _mm512_storeu_ps(dqi + 16 * v, dq[v]);
  }
}

using ShortForwardFn = void (*)(const Sizes&, int64_t, Row<const float>, Row<const float>,
                                Row<const float>, const MaskView&, float, Row<float>, float*);
using ShortBackwardFn = void (*)(const Sizes&, int64_t, Row<const float>, Row<const float>,
                                 Row<const float>, Row<const float>, const float*, Row<const float>,
                                 const MaskView&, float, Row<float>, Row<float>, Row<float>);

// By d / 16, for d = dv up to 128 (q, and O_i's two sums or dO_i and dQ_i: 24 registers at most).
constexpr ShortForwardFn kShortForward512[9] = {nullptr,
                                                short_forward_row512<1>,
                                                short_forward_row512<2>,
                                                short_forward_row512<3>,
                                                short_forward_row512<4>,
                                                short_forward_row512<5>,
                                                short_forward_row512<6>,
                                                short_forward_row512<7>,
                                                short_forward_row512<8>};
constexpr ShortBackwardFn kShortBackward512[9] = {nullptr,
                                                  short_backward_row512<1>,
                                                  short_backward_row512<2>,
                                                  short_backward_row512<3>,
                                                  short_backward_row512<4>,
                                                  short_backward_row512<5>,
                                                  short_backward_row512<6>,
                                                  short_backward_row512<7>,
                                                  short_backward_row512<8>};

// The table's index for these sizes on this CPU, or 0: the portable rows.
int short_width512(const Sizes& z) {
  const bool fits = z.d == z.dv && z.d % 16 == 0 && z.d <= 128;
  return cpu_isa() == Isa::Avx512 && fits ? z.d / 16 : 0;
}

// ---- long rows: blocks on the packed products ----
//
// Their scores are in base 2: K is packed scaled by scale log2 e, so that P = 2^(S - m) is
// exp2_shift's (eleven operations a vector against exp_shift's seventeen; the exponentials were
// a tenth of the forward pass's samples at T = 512), and L is the base-2 log-sum-exp of those
// scores, which the backward pass recomputes the same way.

void forward_kernel(const Sizes& z, Rows<const float> Q, Rows<const float> K, Rows<const float> V,
                    const MaskView& mask, float scale, Rows<float> O, float* L) {
  const int64_t H = z.heads, Tq = z.Tq, Tk = z.Tk;
  const int d = z.d, dv = z.dv;
  if (Tk <= kShortKeys) {
    const int w = short_width512(z);
    const ShortForwardFn forward_row = w ? kShortForward512[w] : short_forward_row;
    for_each_rows(z, [&](int64_t begin, int64_t end) {
      for (int64_t n = begin; n < end; ++n)
        forward_row(z, n, row(Q, n, H), row(K, n, H), row(V, n, H), mask, scale, row(O, n, H),
                    L + n * Tq);
    });
    return;
  }
  // One task per (batch x head) row, whose K and V are packed once for all its query blocks.
  // Blocks no larger than the sequences: at 12 positions, 144 floats instead of 64 Ki.
  const int64_t block_q = std::min<int64_t>(kBlockQ, Tq), block_k = std::min<int64_t>(kBlockK, Tk);
  for_each_rows(z, [&](int64_t begin, int64_t end) {
    // S becomes P in place: one block of scores fewer to keep in cache.
    std::vector<float> s(block_q * block_k), acc(block_q * dv), m(block_q), l(block_q);
    for (int64_t n = begin; n < end; ++n) {
      const auto Qn = row(Q, n, H), Kn = row(K, n, H), Vn = row(V, n, H);
      const auto On = row(O, n, H);
      const auto scaled_kt = Panels<float>::transposed(Kn.data, Tk, d, Kn.ld, {scale * kLog2e});
      const auto vp = Panels<float>::in_place(Vn.data, Tk, dv, Vn.ld);
      for (int64_t i0 = 0; i0 < Tq; i0 += kBlockQ) {
        const int bq = static_cast<int>(std::min<int64_t>(kBlockQ, Tq - i0));
        std::fill(m.begin(), m.end(), kNegInf);
        std::fill(l.begin(), l.end(), 0.f);
        std::fill(acc.begin(), acc.begin() + bq * dv, 0.f);
        for (int64_t j0 = 0; j0 < Tk; j0 += kBlockK) {
          const int bk = static_cast<int>(std::min<int64_t>(kBlockK, Tk - j0));
          block_scores(Qn.at(i0), Qn.ld, scaled_kt, bq, bk, d, s.data(), mask, n, i0, j0);
          for (int i = 0; i < bq; ++i) {
            float* row = s.data() + i * bk;
            const float m_new = std::max(m[i], simd::max_of(row, bk));
            if (m_new == kNegInf) {  // nothing to attend to yet
              std::fill(row, row + bk, 0.f);
              continue;
            }
            const float correction = m[i] == kNegInf ? 0.f : std::exp2(m[i] - m_new);
            l[i] = l[i] * correction + simd::exp2_shift(row, row, bk, m_new);
            if (correction != 1.f)
              for (int c = 0; c < dv; ++c) acc[i * dv + c] *= correction;
            m[i] = m_new;
          }
          vp.multiply_block(s.data(), bq, /*ldx=*/bk, acc.data(), /*ldy=*/dv, /*accumulate=*/true,
                            /*kstride=*/1, /*k_begin=*/j0, /*k_end=*/j0 + bk, /*col_begin=*/0,
                            /*col_end=*/dv);
        }
        for (int i = 0; i < bq; ++i) {
          float* o = On.at(i0 + i);
          const float inv = l[i] > 0 ? 1.f / l[i] : 0.f;
          for (int c = 0; c < dv; ++c) o[c] = acc[i * dv + c] * inv;
          L[n * Tq + i0 + i] = l[i] > 0 ? m[i] + std::log2(l[i]) : kNegInf;
        }
      }
    }
  });
}

// dQ, dK and dV. The short rows add onto them, zero on entry; the long rows' first block of each
// product writes its rows (accumulate = false) and the later ones add, so a gradient whose every
// column an operand covers needs no zero fill (`written_by_blocks`).
void backward_kernel(const Sizes& z, Rows<const float> Q, Rows<const float> K, Rows<const float> V,
                     Rows<const float> O, const float* L, Rows<const float> dO,
                     const MaskView& mask, float scale, Rows<float> dQ, Rows<float> dK,
                     Rows<float> dV) {
  const int64_t H = z.heads, Tq = z.Tq, Tk = z.Tk;
  const int d = z.d, dv = z.dv;
  if (Tk <= kShortKeys) {
    const int w = short_width512(z);
    const ShortBackwardFn backward_row = w ? kShortBackward512[w] : short_backward_row;
    for_each_rows(z, [&](int64_t begin, int64_t end) {
      for (int64_t n = begin; n < end; ++n)
        backward_row(z, n, row(Q, n, H), row(K, n, H), row(V, n, H), row(O, n, H), L + n * Tq,
                     row(dO, n, H), mask, scale, row(dQ, n, H), row(dK, n, H), row(dV, n, H));
    });
    return;
  }
  // One thread per (batch x head) row: each owns its dK and dV, so no two threads write one block.
  const int64_t block_q = std::min<int64_t>(kBlockQ, Tq), block_k = std::min<int64_t>(kBlockK, Tk);
  for_each_rows(z, [&](int64_t begin, int64_t end) {
    std::vector<float> s(block_q * block_k), dp(block_q * block_k), D(Tq);
    for (int64_t n = begin; n < end; ++n) {
      const auto Qn = row(Q, n, H), Kn = row(K, n, H), Vn = row(V, n, H), On = row(O, n, H),
                 dOn = row(dO, n, H);
      const auto dQn = row(dQ, n, H), dKn = row(dK, n, H), dVn = row(dV, n, H);
      for (int64_t i = 0; i < Tq; ++i) {  // scale D_i = scale (dO_i · O_i)
        float acc = 0;
        for (int c = 0; c < dv; ++c) acc += dOn.at(i)[c] * On.at(i)[c];
        D[i] = scale * acc;
      }
      // The operands the transposed products read, packed once for the row, scaled where the
      // product is; the scale of dQ = scale dS K and dK = scale dSᵀ Q rides on dP and D, so that
      // K, Q and dO are read where they lie (Panels::in_place). Scaling dS instead of K and Q
      // changes no bit when the scale is a power of two (d = 64: 1/8).
      const auto scaled_kt =
          Panels<float>::transposed(Kn.data, Tk, d, Kn.ld, {scale * kLog2e});  // S, base 2
      const auto scaled_vt = Panels<float>::transposed(Vn.data, Tk, dv, Vn.ld, {scale});  // dP
      const auto k_rows = Panels<float>::in_place(Kn.data, Tk, d, Kn.ld);      // dQ = (s dS) K
      const auto q_rows = Panels<float>::in_place(Qn.data, Tq, d, Qn.ld);      // dK = (s dS)ᵀ Q
      const auto do_rows = Panels<float>::in_place(dOn.data, Tq, dv, dOn.ld);  // dV = Pᵀ dO
      for (int64_t j0 = 0; j0 < Tk; j0 += kBlockK) {
        const int bk = static_cast<int>(std::min<int64_t>(kBlockK, Tk - j0));
        for (int64_t i0 = 0; i0 < Tq; i0 += kBlockQ) {
          const int bq = static_cast<int>(std::min<int64_t>(kBlockQ, Tq - i0));
          block_scores(Qn.at(i0), Qn.ld, scaled_kt, bq, bk, d, s.data(), mask, n, i0, j0);
          for (int i = 0; i < bq; ++i) {  // P = 2^(S - lse), in place
            const float lse_i = L[n * Tq + i0 + i];
            float* row = s.data() + i * bk;
            if (lse_i == kNegInf)
              std::fill(row, row + bk, 0.f);
            else
              simd::exp2_shift(row, row, bk, lse_i);
          }
          // dV += Pᵀ dO (Pᵀ read in place) ; scale dP = dO (scale V)ᵀ
          do_rows.multiply_block(s.data(), bk, /*ldx=*/1, dVn.at(j0), /*ldy=*/dVn.ld,
                                 /*accumulate=*/i0 > 0, /*kstride=*/bk, /*k_begin=*/i0,
                                 /*k_end=*/i0 + bq, /*col_begin=*/0, /*col_end=*/dv);
          scaled_vt.multiply_block(dOn.at(i0), bq, /*ldx=*/dOn.ld, dp.data(), /*ldy=*/bk,
                                   /*accumulate=*/false, /*kstride=*/1, /*k_begin=*/0, /*k_end=*/dv,
                                   /*col_begin=*/j0, /*col_end=*/j0 + bk);
          for (int i = 0; i < bq; ++i)  // scale dS = P ∘ (scale dP - scale D)
            simd::mul_sub(s.data() + i * bk, dp.data() + i * bk, D[i0 + i], bk);
          // dQ += (scale dS) K ; dK += (scale dS)ᵀ Q
          k_rows.multiply_block(dp.data(), bq, /*ldx=*/bk, dQn.at(i0), /*ldy=*/dQn.ld,
                                /*accumulate=*/j0 > 0, /*kstride=*/1, /*k_begin=*/j0,
                                /*k_end=*/j0 + bk, /*col_begin=*/0, /*col_end=*/d);
          q_rows.multiply_block(dp.data(), bk, /*ldx=*/1, dKn.at(j0), /*ldy=*/dKn.ld,
                                /*accumulate=*/i0 > 0, /*kstride=*/bk, /*k_begin=*/i0,
                                /*k_end=*/i0 + bq, /*col_begin=*/0, /*col_end=*/d);
        }
      }
    }
  });
}

// A float tensor of t's shape, zeroed on the kernels' threads: at::zeros_like fills on one (ATen
// has none under ThreadPolicy::Kernels), 1.3 % of a Transformer training step's caller samples
// with its worker waiting.
at::Tensor zeros_on_threads(const at::Tensor& t) {
  auto z = at::empty(t.sizes(), t.options());
  float* data = z.data_ptr<float>();
  for_each_range(z.numel(),
                 [&](int64_t from, int64_t to) { std::fill(data + from, data + to, 0.f); });
  return z;
}

// Whether the long rows' blocks write every element of a gradient tensor [B, T, C] whose operands
// span these columns ([begin, end), one per operand it holds): when they tile [0, C) exactly. The
// zero fill was 1.4 % of the fused forward + backward's samples at N = 16, T = 512, d = 64.
bool written_by_blocks(const Sizes& z, int64_t C, std::vector<std::pair<int64_t, int64_t>> spans) {
  if (z.Tk <= kShortKeys) return false;
  std::sort(spans.begin(), spans.end());
  int64_t at = 0;
  for (const auto& [begin, end] : spans) {
    if (begin != at) return false;
    at = end;
  }
  return at == C;
}

// Where Q, K and V come from: up to three [B, T, C] tensors and a column in each. `k` undefined:
// keys from `q`'s tensor; `v` undefined: values from `k`'s (so self-attention's one [B, T, 3E]
// projection is one input, and one gradient).
struct Layout {
  int64_t heads, q_col, k_col, v_col, d, dv;
};

class FusedAttention : public torch::autograd::Function<FusedAttention> {
 public:
  // k, v and the mask travel as optionals (an undefined tensor cannot be an autograd input).
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& q,
                            c10::optional<at::Tensor> maybe_k, c10::optional<at::Tensor> maybe_v,
                            c10::optional<at::Tensor> maybe_mask, double scale,
                            std::vector<int64_t> layout) {
    RECORD_FUNCTION("attnkit::fused_attention", std::vector<c10::IValue>());
    const Layout l{layout[0], layout[1], layout[2], layout[3], layout[4], layout[5]};
    const at::Tensor k = maybe_k.value_or(at::Tensor()), v = maybe_v.value_or(at::Tensor());
    const auto& kt = k.defined() ? k : q;
    const auto& vt = v.defined() ? v : kt;
    const at::Tensor mask = maybe_mask.value_or(at::Tensor());
    const int64_t B = q.size(0);
    const Sizes z{B * l.heads,           l.heads, q.size(1), kt.size(1), static_cast<int>(l.d),
                  static_cast<int>(l.dv)};
    auto out = at::empty({B, z.Tq, l.heads * l.dv}, q.options());
    auto lse = at::empty({z.N, z.Tq}, q.options());
    forward_kernel(z, rows_of<const float>(q, l.q_col, l.d), rows_of<const float>(kt, l.k_col, l.d),
                   rows_of<const float>(vt, l.v_col, l.dv), mask_view(mask, B, l.heads, z.Tq, z.Tk),
                   static_cast<float>(scale), rows_of<float>(out, 0, l.dv), lse.data_ptr<float>());
    ctx->save_for_backward({q, k, v, out, lse});
    if (mask.defined()) ctx->saved_data["mask"] = mask;
    ctx->saved_data["scale"] = scale;
    ctx->saved_data["layout"] = layout;
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const auto &q = saved[0], &k = saved[1], &v = saved[2], &out = saved[3], &lse = saved[4];
    const auto layout = ctx->saved_data["layout"].toIntVector();
    const Layout l{layout[0], layout[1], layout[2], layout[3], layout[4], layout[5]};
    const at::Tensor mask =
        ctx->saved_data.count("mask") ? ctx->saved_data["mask"].toTensor() : at::Tensor();
    const double scale = ctx->saved_data["scale"].toDouble();
    const auto& kt = k.defined() ? k : q;
    const auto& vt = v.defined() ? v : kt;
    const auto g = grads[0].contiguous();
    const int64_t B = q.size(0);
    const Sizes z{B * l.heads,           l.heads, q.size(1), kt.size(1), static_cast<int>(l.d),
                  static_cast<int>(l.dv)};
    // One gradient per input tensor, each zero where no operand lies: the columns each holds.
    const std::pair<int64_t, int64_t> q_span{l.q_col, l.q_col + l.heads * l.d},
        k_span{l.k_col, l.k_col + l.heads * l.d}, v_span{l.v_col, l.v_col + l.heads * l.dv};
    std::vector<std::pair<int64_t, int64_t>> q_spans{q_span}, k_spans, v_spans;
    (k.defined() ? k_spans : q_spans).push_back(k_span);
    (v.defined() ? v_spans : k.defined() ? k_spans : q_spans).push_back(v_span);
    const auto gradient = [&](const at::Tensor& t, const auto& spans) {
      return written_by_blocks(z, t.size(2), spans) ? at::empty(t.sizes(), t.options())
                                                    : zeros_on_threads(t);
    };
    auto dq = gradient(q, q_spans);
    at::Tensor dk = k.defined() ? gradient(k, k_spans) : at::Tensor();
    at::Tensor dv = v.defined() ? gradient(v, v_spans) : at::Tensor();
    const auto& dkt = dk.defined() ? dk : dq;
    const auto& dvt = dv.defined() ? dv : dkt;
    backward_kernel(z, rows_of<const float>(q, l.q_col, l.d),
                    rows_of<const float>(kt, l.k_col, l.d), rows_of<const float>(vt, l.v_col, l.dv),
                    rows_of<const float>(out, 0, l.dv), lse.data_ptr<float>(),
                    rows_of<const float>(g, 0, l.dv), mask_view(mask, B, l.heads, z.Tq, z.Tk),
                    static_cast<float>(scale), rows_of<float>(dq, l.q_col, l.d),
                    rows_of<float>(dkt, l.k_col, l.d), rows_of<float>(dvt, l.v_col, l.dv));
    return {dq, dk, dv, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

at::Tensor checked_mask(const at::Tensor& mask, int64_t batch, int64_t tq, int64_t tk,
                        const char* where) {
  if (!mask.defined()) return {};
  TORCH_CHECK(mask.dim() == 3, where, ": the mask must be 3-D, got ", mask.sizes());
  auto m = mask.to(at::kBool).contiguous();
  m.expand({batch, tq, tk});  // validates the broadcast
  return m;
}

void check_float(const at::Tensor& x, const char* where) {
  TORCH_CHECK(x.scalar_type() == at::kFloat && x.device().is_cpu(), where,
              ": float32 CPU tensors only (use functional::scaled_dot_product_attention "
              "otherwise)");
}

at::Tensor run(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
               const at::Tensor& mask, double scale, const Layout& l) {
  auto optional = [](const at::Tensor& x) {
    return x.defined() ? c10::optional<at::Tensor>(x) : c10::nullopt;
  };
  const double s = scale > 0 ? scale : 1.0 / std::sqrt(static_cast<double>(l.d));
  return FusedAttention::apply(q, optional(k), optional(v), optional(mask), s,
                               std::vector<int64_t>{l.heads, l.q_col, l.k_col, l.v_col, l.d, l.dv});
}

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
  for (const auto& x : {q, k, v}) check_float(x, "fused_attention");
  const auto m = checked_mask(mask, q.size(0), q.size(1), k.size(1), "fused_attention");
  return run(q.contiguous(), k.contiguous(), v.contiguous(), m, scale,
             {/*heads=*/1, /*q_col=*/0, /*k_col=*/0, /*v_col=*/0, q.size(2), v.size(2)});
}

at::Tensor fused_multihead_attention(const at::Tensor& q, const at::Tensor& kv, int64_t heads,
                                     const at::Tensor& mask, double scale) {
  const bool self = !kv.defined();
  const auto& keys = self ? q : kv;
  TORCH_CHECK(heads > 0 && q.dim() == 3 && keys.dim() == 3 && q.size(0) == keys.size(0),
              "fused_multihead_attention: ", self ? "QKV " : "Q ", q.sizes(), self ? "" : ", KV ",
              self ? c10::IntArrayRef{} : kv.sizes(),
              " must be [B, T, C] with one batch, and heads positive");
  const int64_t e = self ? q.size(2) / 3 : q.size(2);
  TORCH_CHECK(e % heads == 0 && (self ? q.size(2) == 3 * e : kv.size(2) == 2 * e),
              "fused_multihead_attention: ",
              self ? "QKV must be [B, T, 3E]" : "Q must be [B, Tq, E] and KV [B, Tk, 2E]",
              " with heads (", heads, ") dividing E; got ", self ? "QKV " : "Q ", q.sizes(),
              self ? "" : ", KV ", self ? c10::IntArrayRef{} : kv.sizes());
  check_float(q, "fused_multihead_attention");
  if (!self) check_float(kv, "fused_multihead_attention");
  const auto m =
      checked_mask(mask, q.size(0), q.size(1), keys.size(1), "fused_multihead_attention");
  const int64_t d = e / heads;
  return run(q.contiguous(), self ? at::Tensor() : kv.contiguous(), at::Tensor(), m, scale,
             {heads, /*q_col=*/0, /*k_col=*/self ? e : 0, /*v_col=*/self ? 2 * e : e, d, d});
}

}  // namespace attnkit::kernels
