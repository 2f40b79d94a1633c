#include "products.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <vector>

#include "../../core/blas.h"
#include "../cpu/row_parts.h"
#include "../cpu/simd.h"
#include "packed_gemm.h"

namespace attnkit::kernels::products {

using packed::Panels;

namespace {

// A piece of a product's work that one thread claims at a time (for_each_task): units
// [from, to) of product `what`, a unit being a row of the result or a panel of columns.
struct Piece {
  int what = 0;
  int64_t from = 0, to = 0;
};

// How the units of one product are cut: `count` units of `cost` each (its FLOPs), pieces of a
// multiple of `grain` units and at most `most`.
struct Cut {
  int64_t count = 0;
  double cost = 0;
  int64_t grain = 1, most = 1;
};

// The products' units in order, in pieces for `parts` threads that claim them one at a time:
// `most` units while much work is left, then a thread's share of what is left (guided
// self-scheduling), down to one grain, so that the threads finish within a small piece of each
// other however their speeds differ. One thread takes each product whole, as one call would.
std::vector<Piece> pieces(const std::vector<Cut>& cuts, int64_t parts) {
  double left = 0;
  for (const auto& c : cuts) left += c.count * c.cost;
  std::vector<Piece> out;
  for (size_t i = 0; i < cuts.size(); ++i) {
    const Cut& c = cuts[i];
    if (parts == 1) {
      if (c.count > 0) out.push_back({static_cast<int>(i), 0, c.count});
      continue;
    }
    for (int64_t from = 0; from < c.count;) {
      const double want = c.cost > 0 ? left / parts / c.cost : c.most;
      const int64_t grains = static_cast<int64_t>(std::min<double>(want, c.most) / c.grain);
      const int64_t size = std::min(c.most, std::max<int64_t>(1, grains) * c.grain);
      const int64_t to = std::min(c.count, from + size);
      out.push_back({static_cast<int>(i), from, to});
      left -= (to - from) * c.cost;
      from = to;
    }
  }
  return out;
}

// y = (bias +) x W^T (+ y when accumulate) on `parts` threads by W's columns: each piece up to 8
// panels of W^T that its thread packs and multiplies every row by. Packing every panel first (a
// hand-off of its own) and then giving each thread its rows took two hand-offs, and each
// thread's panels stay in its own L2: on two threads of a Zen 5 that was 15-21 % faster at a
// training step's shapes (Forward/512x<in>x<out>). Pieces start on a panel boundary, so each
// element is the same sum as in one product, the same bits. (Decoding's products by weights
// packed once keep splitting rows: by columns they ran 4-16 % faster alone but slowed the beam
// search in seven of seven alternated pairs, whose other work splits rows.)
void by_columns(const float* x, int64_t rows, int64_t in, const float* w, int64_t ldw, int64_t out,
                float* y, bool accumulate, const float* bias, int64_t parts) {
  const int64_t width = cpu_isa() == Isa::Avx512 ? 32 : 16, panels = (out + width - 1) / width;
  const auto work =
      pieces({{panels, 2.0 * rows * in * width, /*grain=*/1, /*most=*/8}}, std::min(parts, panels));
  for_each_task(parts, static_cast<int64_t>(work.size()), [&](int64_t t) {
    const int64_t first = work[t].from * width, last = std::min(out, work[t].to * width);
    Panels<float>::transposed(w + first * ldw, last - first, in, ldw)
        .multiply(x, rows, /*ldx=*/in, y + first, /*ldy=*/out, accumulate, /*kstride=*/1,
                  bias ? bias + first : nullptr);
  });
}

}  // namespace

void linear(const float* x, int64_t rows, int64_t in, const float* w, int64_t out, float* y,
            bool accumulate, int64_t ldw) {
  if (ldw == 0) ldw = in;
  if (rows < blas::kGemvRows) {
    blas::linear(x, static_cast<int>(rows), static_cast<int>(in), w, static_cast<int>(out), y,
                 accumulate, /*ldx=*/0, /*ldy=*/0, /*ldw=*/static_cast<int>(ldw));
    return;
  }
  by_columns(x, rows, in, w, ldw, out, y, accumulate, /*bias=*/nullptr,
             row_parts(rows, 2.0 * rows * in * out));
}

void affine(const float* x, int64_t rows, int64_t in, const float* w, int64_t out,
            const float* bias, float* y, int64_t ldw) {
  if (ldw == 0) ldw = in;
  if (rows >= blas::kGemvRows) {  // the bias starts the sums (copied into y, it was 1 % of a step)
    by_columns(x, rows, in, w, ldw, out, y, /*accumulate=*/false, bias,
               row_parts(rows, 2.0 * rows * in * out));
    return;
  }
  if (bias)
    for (int64_t r = 0; r < rows; ++r) std::copy(bias, bias + out, y + r * out);
  linear(x, rows, in, w, out, y, /*accumulate=*/bias != nullptr, ldw);
}

void linear_backward(const float* dy, int64_t rows, int64_t in, int64_t out, const float* x,
                     const float* w, int64_t ldw, float alpha, float* dx, float* dw, float* db) {
  if (rows < blas::kGemvRows) {
    blas::linear_backward(dy, static_cast<int>(rows), static_cast<int>(in), static_cast<int>(out),
                          x, w, static_cast<int>(ldw), alpha, dx, dw);
    if (db) column_sums(dy, rows, out, out, db);
    return;
  }
  // dx = alpha dy [rows, out] W [out, in]; dw = alpha dy^T [out, rows] x [rows, in]; db's column
  // sums first, a piece per thread (16 columns apart: each column's sum runs over the rows in
  // order, whatever the split), then the rows of dx and of dw in pieces.
  const int64_t parts = row_parts(std::max(rows, out), 2.0 * rows * in * out);
  const auto w_rows =
      dx ? Panels<float>::in_place(w, out, in, ldw, {alpha, parts}) : Panels<float>();
  const auto x_rows =
      dw ? Panels<float>::in_place(x, rows, in, in, {alpha, parts}) : Panels<float>();
  const int64_t sums = db ? std::min(parts, std::max<int64_t>(1, out / 16)) : 0;
  // Pieces of whole register blocks of rows (both ISAs'), kRowBlock at most. Every piece streams
  // all of its product's B, so the product with the smaller B goes last, with the small pieces.
  const Cut dx_rows{dx ? rows : 0, 2.0 * out * in, /*grain=*/24, packed::kRowBlock},
      dw_rows{dw ? out : 0, 2.0 * rows * in, /*grain=*/24, packed::kRowBlock};
  const auto work =
      out > rows ? pieces({dx_rows, dw_rows}, parts) : pieces({dw_rows, dx_rows}, parts);
  for_each_task(parts, sums + static_cast<int64_t>(work.size()), [&](int64_t t) {
    if (t < sums) {
      auto edge = [&](int64_t e) { return e == sums ? out : out * e / sums / 16 * 16; };
      simd::column_sums(dy + edge(t), rows, out, db + edge(t), edge(t + 1) - edge(t));
      return;
    }
    const Piece& p = work[t - sums];
    if ((p.what == 0) == (out > rows))
      w_rows.multiply(dy + p.from * out, p.to - p.from, /*ldx=*/out, dx + p.from * in,
                      /*ldy=*/in, /*accumulate=*/false);
    else  // dw's rows are dy's columns
      x_rows.multiply(dy + p.from, p.to - p.from, /*ldx=*/1, dw + p.from * in, /*ldy=*/in,
                      /*accumulate=*/false, /*kstride=*/out);
  });
}

void weight_gradient(const float* a, int64_t lda, const float* b, int64_t ldb, float* c, int64_t m,
                     int64_t n, int64_t k, float alpha) {
  if (k == 0) {
    std::fill(c, c + m * n, 0.f);
    return;
  }
  const int64_t parts = row_parts(m, 2.0 * m * n * k);
  Panels<float>::in_place(b, k, n, ldb, {alpha, parts})  // packed when alpha must ride on it
      .multiply_parallel(a, m, /*ldx=*/1, c, /*ldy=*/n, /*accumulate=*/false, /*kstride=*/lda,
                         parts);
}

void column_sums(const float* d, int64_t rows, int64_t cols, int64_t ld, float* out) {
  for_each_range(
      cols,
      [&](int64_t from, int64_t to) {
        simd::column_sums(d + from, rows, ld, out + from, to - from);
      },
      /*per_index=*/rows);
}

at::Tensor column_sums(const at::Tensor& d) {
  TORCH_CHECK(d.dim() == 2, "column_sums: expected a matrix, got ", d.sizes());
  if (d.scalar_type() != at::kFloat || !d.device().is_cpu()) return d.sum(0);
  const auto c = d.contiguous();
  auto out = at::empty({c.size(1)}, c.options());
  column_sums(c.data_ptr<float>(), c.size(0), c.size(1), c.size(1), out.data_ptr<float>());
  return out;
}

}  // namespace attnkit::kernels::products
