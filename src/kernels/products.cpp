#include "products.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "blas.h"
#include "packed_gemm.h"
#include "row_parts.h"
#include "simd.h"

namespace attnkit::kernels::products {

using packed::Panels;

namespace {

// y = (bias +) x W^T (+ y when accumulate) on `parts` threads, each packing the panels of its own
// columns of W^T and multiplying every row by them: one hand-off, where packing every panel (a
// hand-off of its own) and then giving each thread its rows took two, and each thread's panels
// stay in its own L2. On two threads of a Zen 5 that was 15-21 % faster at a training step's
// shapes (Forward/512x<in>x<out>). Its columns start on a panel boundary, so each element is the
// same sum as in one product, the same bits. (Decoding's products by weights packed once keep
// splitting rows: by columns they ran faster alone but slowed the beam search, whose other work
// splits rows; docs/PERFORMANCE.md, stop 45.)
void by_columns(const float* x, int64_t rows, int64_t in, const float* w, int64_t ldw, int64_t out,
                float* y, bool accumulate, const float* bias, int64_t parts) {
  const int64_t width = cpu_isa() == Isa::Avx512 ? 32 : 16, panels = (out + width - 1) / width;
  for_each_row_part(std::min(parts, panels), [&](RowPart part) {
    const int64_t first = panels * part.first / part.stride * width,
                  last = std::min(out, panels * (part.first + 1) / part.stride * width);
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
  // dx = alpha dy [rows, out] W [out, in]; dw = alpha dy^T [out, rows] x [rows, in].
  const int64_t parts = row_parts(std::max(rows, out), 2.0 * rows * in * out);
  const auto w_rows =
      dx ? Panels<float>::in_place(w, out, in, ldw, {alpha, parts}) : Panels<float>();
  const auto x_rows =
      dw ? Panels<float>::in_place(x, rows, in, in, {alpha, parts}) : Panels<float>();
  const int64_t dx_shares = dx ? w_rows.shares(rows, parts) : 0,
                dw_shares = dw ? x_rows.shares(out, parts) : 0,
                db_shares = db ? std::min(parts, std::max<int64_t>(1, out / 16)) : 0;
  for_each_row_part(std::max({dx_shares, dw_shares, db_shares}), [&](RowPart part) {
    const int64_t j = part.first;
    if (j < dx_shares)
      w_rows.multiply_share(dy, rows, /*ldx=*/out, dx, /*ldy=*/in, /*accumulate=*/false,
                            /*kstride=*/1, dx_shares, j);
    if (j < dw_shares)
      x_rows.multiply_share(dy, out, /*ldx=*/1, dw, /*ldy=*/in, /*accumulate=*/false,
                            /*kstride=*/out, dw_shares, j);
    if (j < db_shares) {  // each column's sum runs over the rows in order, whatever the split
      auto edge = [&](int64_t e) { return e == db_shares ? out : out * e / db_shares / 16 * 16; };
      simd::column_sums(dy + edge(j), rows, out, db + edge(j), edge(j + 1) - edge(j));
    }
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
