#pragma once

// Private to src/kernels: products with a weight packed once and reused across a sequence's
// steps. OpenBLAS packs the whole weight on every call, however few the rows: a decoder step
// multiplies 64 rows by a 256 x 768 weight four times, and over a sequence that packing and
// OpenBLAS's per-call thread hand-off cost as much as a third of the products. Packed once, the
// weight is streamed by a register-blocked AVX2 kernel on one thread, so a kernel can give each
// thread its own rows for a whole sequence (measured single-threaded at M = 32-64, K = 256-768:
// 124-132 GFLOP/s against OpenBLAS's 98-116).
//
// Every output element is one sum over k in ascending order whatever the rows, the row block
// or the thread, so splitting rows between threads never changes a result.

#include <cstdint>
#include <vector>

namespace attnkit::kernels::packed {

// op(B) [K, N] stored as column panels of kPanel (zero-padded at the right edge), each panel
// k-major: panel p holds op(B)[k, p * kPanel + j] at (p * K + k) * kPanel + j.
template <typename T>
class Panels {
 public:
  static constexpr int64_t kPanel = 16;

  Panels() = default;
  // op(B) = W^T for W [N, K] with rows ldw apart: the nn.Linear layout, y = x W^T.
  static Panels transposed(const T* w, int64_t n, int64_t k, int64_t ldw);
  // op(B) = B [K, N] with rows ldb apart: y = x B, as a backward pass multiplies by W.
  static Panels plain(const T* b, int64_t k, int64_t n, int64_t ldb);

  // y[m, N] = x[m, K] op(B) (+ y when accumulate); x rows ldx apart, y rows ldy apart.
  void multiply(const T* x, int64_t m, int64_t ldx, T* y, int64_t ldy, bool accumulate) const;

  int64_t k() const { return k_; }
  int64_t n() const { return n_; }

 private:
  Panels(int64_t k, int64_t n);
  int64_t k_ = 0, n_ = 0;
  std::vector<T> data_;
};

extern template class Panels<float>;
extern template class Panels<double>;

}  // namespace attnkit::kernels::packed
