#pragma once

// Private to src/kernels: products with a packed weight, streamed by register-blocked AVX-512 or
// AVX2 kernels.
//
// Two reasons not to leave these products to OpenBLAS. OpenBLAS packs the whole weight on every
// call, however few the rows: a decoder step multiplies 64 rows by a 256 x 768 weight four
// times, and over a sequence that packing and OpenBLAS's hand-off between its threads cost as
// much as a third of the products. Packed once, the weight is streamed on one thread, so a
// kernel can give each thread its own rows for a whole sequence. And OpenBLAS 0.3.21 does not
// know every CPU with AVX-512 (it runs its AVX2 kernels on Zen 5), while the AVX-512 block here
// runs at twice the AVX2 block's rate where the CPU has full-width AVX-512 units (one core,
// M = 64, K = 256, N = 768: 268 against 136 GFLOP/s; OpenBLAS 114; bench `PackedGemm`).
//
// Every output element is one sum over k in ascending order whatever the rows, the row block
// or the thread, so splitting rows between threads never changes a result.

#include <cstdint>
#include <memory>
#include <new>

#include "attnkit/kernels/cpu/cpu_isa.h"

namespace attnkit::kernels::packed {

// multiply_block takes x's rows this many at a time (a multiple of both ISAs' register blocks,
// 8 and 6 rows; see there): a caller that cuts a product's rows into pieces of this size loses
// no speed to the cuts.
inline constexpr int64_t kRowBlock = 96;

// How a matrix is packed: scaled by `scale` (a GEMM's alpha, free here), by `parts` threads, for
// the register blocks of `isa` (float; double always takes the portable loop).
struct PackOptions {
  double scale = 1;
  int64_t parts = 1;
  Isa isa = cpu_isa();
  // For panels kept and multiplied call after call with other work between (a model's weights
  // in decoding), which come from L3: the first row block of each panel prefetches the next
  // panel's slice. A decoder step's products (bench `StepProducts/<M>`, one Zen 5 core) ran 4-14 %
  // faster with it; freshly packed panels (training) ran 1-5 % slower, and do not stream.
  bool streamed = false;
};

// op(B) [K, N] stored as column panels of width() (zero-padded at the right edge), each panel
// k-major: panel p holds op(B)[k, p * width() + j] at (p * K + k) * width() + j.
template <typename T>
class Panels {
 public:
  Panels() = default;
  // op(B) = W^T for W [N, K] with rows ldw apart: the nn.Linear layout, y = x W^T.
  static Panels transposed(const T* w, int64_t n, int64_t k, int64_t ldw,
                           const PackOptions& options = {});
  // op(B) = B [K, N] with rows ldb apart: y = x B, as a backward pass multiplies by W.
  static Panels plain(const T* b, int64_t k, int64_t n, int64_t ldb,
                      const PackOptions& options = {});

  // op(B) = B as `plain` packs it, but read where it lies, without a copy, when its columns fill
  // whole panels (n a multiple of the ISA's width) and options.scale is 1; otherwise packed. The
  // same sums either way, so the same bits; B must outlive the Panels. Why: the fused attention
  // kernel multiplies by each head's V once per block of queries, and packing it took 2.3-2.5 % of
  // its samples. Rows a multiple of 4 KiB apart are packed anyway: read in place they share one
  // L1 set, and ran 10-11 % slower (bench `Backward/dX/*/512x1024x256`).
  static Panels in_place(const T* b, int64_t k, int64_t n, int64_t ldb,
                         const PackOptions& options = {});

  // y[m, N] = x[m, K] op(B) (+ y when accumulate); x[i, k] at x + i * ldx + k * kstride (kstride
  // 1: rows; ldx 1 and kstride > 1: x is the transpose of a row-major matrix), y rows ldy apart.
  // Without accumulate, a `bias` [N] starts every row's sums: y = bias + x op(B), the same bits as
  // copying the bias into each row of y and accumulating, without the copy.
  void multiply(const T* x, int64_t m, int64_t ldx, T* y, int64_t ldy, bool accumulate,
                int64_t kstride = 1, const T* bias = nullptr) const;

  // y[m, col_end - col_begin] (=|+=) x op(B)[k_begin:k_end, col_begin:col_end], x's column 0
  // being op(B)'s row k_begin: a block of a packed matrix, as attention multiplies by blocks of
  // K and V. col_begin must be a multiple of width(). bias, as y, starts at column col_begin.
  void multiply_block(const T* x, int64_t m, int64_t ldx, T* y, int64_t ldy, bool accumulate,
                      int64_t kstride, int64_t k_begin, int64_t k_end, int64_t col_begin,
                      int64_t col_end, const T* bias = nullptr) const;

  // The same with x's rows split between `parts` threads in contiguous blocks, or, when there are
  // too few rows for that, op(B)'s panels: for products too large for one thread that are not
  // already inside a kernel's row parts. Either way every element is the same sum.
  void multiply_parallel(const T* x, int64_t m, int64_t ldx, T* y, int64_t ldy, bool accumulate,
                         int64_t kstride, int64_t parts, const T* bias = nullptr) const;

  // multiply_parallel in pieces, for a caller that runs several products in one hand-off to the
  // threads: it splits an m-row product into part_count(m, parts) parts (at most `parts`), and
  // multiply_part(..., count, j) computes part j of them.
  int64_t part_count(int64_t m, int64_t parts) const;
  void multiply_part(const T* x, int64_t m, int64_t ldx, T* y, int64_t ldy, bool accumulate,
                     int64_t kstride, int64_t count, int64_t j, const T* bias = nullptr) const;

  int64_t k() const { return k_; }
  int64_t n() const { return n_; }
  int64_t width() const { return width_; }
  Isa isa() const { return isa_; }

 private:
  Panels(int64_t k, int64_t n, Isa isa);
  // A new matrix whose panels `fill(panel, first column, columns, width, scale)` writes, split
  // between options.parts threads.
  template <typename Fill>
  static Panels pack(int64_t k, int64_t n, const PackOptions& options, const Fill& fill);
  int64_t k_ = 0, n_ = 0, width_ = 16;
  Isa isa_ = Isa::Scalar;
  // Uninitialised but for the last panel's padding; 64-byte aligned, so that no panel vector
  // load straddles two cache lines (with new[]'s 16 bytes, three in four did, and the same
  // product ran at 80-140 GFLOP/s from run to run as the allocation's address changed).
  struct Free {
    void operator()(T* p) const { ::operator delete[](p, std::align_val_t(64)); }
  };
  std::unique_ptr<T[], Free> data_;
  // Where the panels are read: data_, or B itself (in_place). Element (k, j) of panel p is at
  // base_ + p * panel_stride_ + k * ldb_ + j.
  const T* base_ = nullptr;
  int64_t ldb_ = 16, panel_stride_ = 0;
  bool streamed_ = false;  // PackOptions::streamed
};

extern template class Panels<float>;
extern template class Panels<double>;

}  // namespace attnkit::kernels::packed
