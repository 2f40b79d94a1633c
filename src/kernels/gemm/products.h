#pragma once

// Private to src/kernels: the float32 products a training step makes once each (the output
// layer, the input projections, the weight gradients), on the packed AVX-512/AVX2 blocks with
// rows split between the configured threads (packed_gemm.h says why not OpenBLAS). The same
// calls as blas.h; below blas::kGemvRows rows they go to BLAS's GEMV, as there.

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace attnkit::kernels::products {

// y[rows, out] = x[rows, in] W^T (+ y when accumulate), W row-major [out, in] (nn.Linear),
// rows ldw apart (0: in).
void linear(const float* x, int64_t rows, int64_t in, const float* w, int64_t out, float* y,
            bool accumulate, int64_t ldw = 0);

// y[rows, out] = bias + x W^T, y contiguous; bias nullptr: no bias.
void affine(const float* x, int64_t rows, int64_t in, const float* w, int64_t out,
            const float* bias, float* y, int64_t ldw = 0);

// The backward pass of y = x W^T (+ b) for dy [rows, out]: dx [rows, in] = alpha dy W,
// dw [out, in] = alpha dy^T x and db [out] = the column sums of dy (column_sums' bits), each
// skipped when its pointer is null. The three share one hand-off to the threads (a training step
// made about 400 hand-offs, and the caller waited for its worker at the end of each), whose
// threads claim pieces of rows of dx and dw one at a time (for_each_task), so that the one
// running faster takes more: given halves, the two ended 2-7 ms of a step's 2 x 75 apart.
void linear_backward(const float* dy, int64_t rows, int64_t in, int64_t out, const float* x,
                     const float* w, int64_t ldw, float alpha, float* dx, float* dw,
                     float* db = nullptr);

// c[m, n] = alpha a[k, m]^T b[k, n], a rows lda apart and b rows ldb apart: a weight's gradient
// summed over k rows (every step of a sequence at once).
void weight_gradient(const float* a, int64_t lda, const float* b, int64_t ldb, float* c, int64_t m,
                     int64_t n, int64_t k, float alpha = 1.f);

// out[j] = sum over the rows of d[i, j] (rows ld apart), each column summed in row order: a bias's
// gradient, ones^T dy. The columns are split between threads, so the sums do not depend on their
// number. ATen's sum(0) runs on one thread under ThreadPolicy::Kernels (ATen gets none), and
// with its pool's worker idle meanwhile the bias gradients were 2 % of a GRU training step.
void column_sums(const float* d, int64_t rows, int64_t cols, int64_t ld, float* out);

// The same for a tensor [rows, cols] -> [cols]: float32 on CPU here, anything else by sum(0).
at::Tensor column_sums(const at::Tensor& d);

}  // namespace attnkit::kernels::products
