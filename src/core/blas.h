#pragma once

// Private to the library (core's SGEMM measure, the kernels): row-major wrappers over the
// Fortran BLAS that LibTorch itself links (OpenBLAS once setup has run), for loops that cannot
// afford a dispatcher call per product.

#include <algorithm>
#include <cstdint>

extern "C" {
void sgemm_(const char* transa, const char* transb, const int* m, const int* n, const int* k,
            const float* alpha, const float* a, const int* lda, const float* b, const int* ldb,
            const float* beta, float* c, const int* ldc);
void dgemm_(const char* transa, const char* transb, const int* m, const int* n, const int* k,
            const double* alpha, const double* a, const int* lda, const double* b, const int* ldb,
            const double* beta, double* c, const int* ldc);
void sgemv_(const char* trans, const int* m, const int* n, const float* alpha, const float* a,
            const int* lda, const float* x, const int* incx, const float* beta, float* y,
            const int* incy);
}

namespace attnkit::blas {

// Row-major C[M, N] = alpha op(A) op(B) + beta C. A row-major matrix is its transpose in
// column-major order, so this computes C^T = op(B)^T op(A)^T.
inline void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
                 int lda, const float* b, int ldb, float beta, float* c, int ldc) {
  const char ta = trans_a ? 'T' : 'N', tb = trans_b ? 'T' : 'N';
  sgemm_(&tb, &ta, &n, &m, &k, &alpha, b, &ldb, a, &lda, &beta, c, &ldc);
}

// The same in double, for kernels that also run in double precision (finite-difference tests).
inline void gemm(bool trans_a, bool trans_b, int m, int n, int k, double alpha, const double* a,
                 int lda, const double* b, int ldb, double beta, double* c, int ldc) {
  const char ta = trans_a ? 'T' : 'N', tb = trans_b ? 'T' : 'N';
  dgemm_(&tb, &ta, &n, &m, &k, &alpha, b, &ldb, a, &lda, &beta, c, &ldc);
}

// Below this many rows, one GEMV per row beats one GEMM: OpenBLAS's GEMM packs all of W whatever
// the rows, and that packing (sgemm_incopy) was the largest single cost in the profile of greedy
// decoding at batch 1. Measured single-threaded for W of 128-512 x 256-768: GEMV per row was
// 3-6x faster for 1-3 rows, 1.3x for 4-6 and even at 8.
constexpr int kGemvRows = 8;

// y[rows, out] = x[rows, in] W^T (+ y when accumulate), W row-major [out, in] as nn.Linear keeps
// it, rows ldw apart (0: in).
inline void linear(const float* x, int rows, int in, const float* w, int out, float* y,
                   bool accumulate, int ldx = 0, int ldy = 0, int ldw = 0) {
  if (ldx == 0) ldx = in;
  if (ldy == 0) ldy = out;
  if (ldw == 0) ldw = in;
  const float one = 1.f, beta = accumulate ? 1.f : 0.f;
  if (rows < kGemvRows) {
    const int inc = 1;
    const char t = 'T';  // W row-major [out, in] is column-major [in, out]; y = (W^T)^T x
    for (int r = 0; r < rows; ++r)
      sgemv_(&t, &in, &out, &one, w, &ldw, x + r * ldx, &inc, &beta, y + r * ldy, &inc);
    return;
  }
  gemm(/*trans_a=*/false, /*trans_b=*/true, rows, out, in, 1.f, x, ldx, w, ldw, beta, y, ldy);
}

// y[rows, out] = bias + x[rows, in] W^T, y contiguous; bias nullptr: no bias.
inline void affine(const float* x, int rows, int in, const float* w, int out, const float* bias,
                   float* y, int ldw = 0) {
  if (bias)
    for (int r = 0; r < rows; ++r) std::copy(bias, bias + out, y + static_cast<int64_t>(r) * out);
  linear(x, rows, in, w, out, y, /*accumulate=*/bias != nullptr, 0, 0, ldw);
}

// The backward pass of y = x W^T for dy [rows, out]: dx [rows, in] = alpha dy W and
// dw [out, in] = alpha dy^T x, each skipped when its pointer is null. W is read with rows ldw
// apart, as linear() reads it.
inline void linear_backward(const float* dy, int rows, int in, int out, const float* x,
                            const float* w, int ldw, float alpha, float* dx, float* dw) {
  if (dx)
    gemm(/*trans_a=*/false, /*trans_b=*/false, rows, in, out, alpha, dy, out, w, ldw, 0.f, dx, in);
  if (dw)
    gemm(/*trans_a=*/true, /*trans_b=*/false, out, in, rows, alpha, dy, out, x, in, 0.f, dw, in);
}

}  // namespace attnkit::blas
