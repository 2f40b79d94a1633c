#pragma once
// Private to src/kernels: int8 products for inference, y = x W^T with both sides quantized
// symmetrically per row (issue 17's int8 compute type, as CTranslate2's int8).
//
// The math. A row r of floats becomes q = round(r * 127 / max|r|) in [-127, 127] and a scale
// s = max|r| / 127, so r ~ s q elementwise with |r - s q| <= s / 2. Then
//   y[m, n] = s_x[m] s_w[n] sum_k q_x[m, k] q_w[n, k] + b[n],
// the sum exact in int32 (|q| <= 127: no overflow below K = 133,000), and the float epilogue one
// fma(float(sum), s_x[m] * s_w[n], b[n]) in every path.
//
// Why it exists: a float weight costs four bytes per multiply-add streamed from memory and an
// int8 one one byte, and AVX-512 VNNI's vpdpbusd does 64 multiply-adds per instruction against
// AVX-512's 16 float FMAs. vpdpbusd multiplies unsigned by signed bytes, so that path adds 128
// to x's bytes and subtracts 128 sum_k q_w[n, k] after (the weight's compensation, computed at
// packing). The AVX2 path widens both sides to 16 bits and uses vpmaddwd: exact too, where
// vpmaddubsw's 16-bit sums would saturate (255 * 127 * 2 > 32767).
//
// The invariant tests/test_int8_gemm.cpp enforces: every path (scalar, AVX2, AVX-512 VNNI) gives
// the same int32 sums as an exact integer reference and the same float outputs, bit for bit.
#include <cstdint>
#include <new>
#include <vector>

#include "attnkit/kernels/cpu/cpu_isa.h"

namespace attnkit::kernels::int8 {

// 64-byte aligned storage for the panels: a group (one zmm load) never straddles two cache lines.
template <typename T>
struct Aligned64 {
  using value_type = T;
  Aligned64() = default;
  template <typename U>
  Aligned64(const Aligned64<U>&) {}
  T* allocate(size_t n) {
    return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t(64)));
  }
  void deallocate(T* p, size_t) { ::operator delete(p, std::align_val_t(64)); }
  bool operator==(const Aligned64&) const { return true; }
  bool operator!=(const Aligned64&) const { return false; }
};

// q[r, c] = round-half-even(x[r, c] * 127 / max_c |x[r, c]|), scale[r] = max_c |x[r, c]| / 127;
// an all-zero row gives q = 0 and scale 0. x rows ldx apart, q rows `cols` apart. The AVX-512
// loop (where `isa` allows) gives the scalar loop's bytes and scales.
void quantize_rows(const float* x, int64_t rows, int64_t cols, int64_t ldx, int8_t* q, float* scale,
                   Isa isa = cpu_isa());

// The AVX-512 VNNI path runs where cpu_isa() is Avx512 and the CPU has AVX-512 VNNI and BW;
// else the AVX2 path where cpu_isa() allows it; else the scalar one.
enum class Path { Scalar, Avx2, Avx512Vnni };
Path path_for(Isa isa);

// A weight W [N, K] quantized per output row and packed: panels of 16 output columns, K in
// groups of 4 (zero-padded), each group's 16 columns x 4 bytes contiguous (one zmm register, as
// vpdpbusd reads it).
class Panels {
 public:
  Panels() = default;
  // W [n, k] float32, rows ldw apart (the nn.Linear layout).
  static Panels quantize(const float* w, int64_t n, int64_t k, int64_t ldw, Isa isa = cpu_isa());

  // acc[m, N] = q_x[m, K] q_w^T, exact; q_x rows k() apart.
  void sums(const int8_t* qx, int64_t m, int32_t* acc) const;
  // y[m, N] = fma(float(acc), scale_x[m] * scale_w[n], c) with c = y's value when accumulate,
  // else bias[n] (nullptr: 0); y rows ldy apart.
  void multiply(const int8_t* qx, const float* scale_x, int64_t m, const float* bias, float* y,
                int64_t ldy, bool accumulate = false, int64_t parts = 1) const;
  // x [m, K] float -> y, quantizing x's rows first (ldx apart). `parts` threads (row_parts.h):
  // rows in blocks, or, with too few rows, the weight's panels; either way the same bits.
  void multiply(const float* x, int64_t m, int64_t ldx, const float* bias, float* y, int64_t ldy,
                bool accumulate = false, int64_t parts = 1) const;

  int64_t n() const { return n_; }
  int64_t k() const { return k_; }
  Path path() const { return path_; }
  const std::vector<float>& scales() const { return scale_; }  // [N] (padded to whole panels)
  // q_w[row, col], read back from the panels.
  int8_t at(int64_t row, int64_t col) const;
  // Bytes held: the packed weight, its scales and its compensation.
  int64_t bytes() const;

  static constexpr int64_t kWidth = 16, kGroup = 4;

 private:
  // The blocks' int32 sums for rows [r0, r1) and panels [p0, p1) of x prepared for the path
  // (prepare()), handed to `finish(rows' first, row count, first column, columns, sums, ld)`.
  template <typename Finish>
  void run(const void* prepared, int64_t r0, int64_t r1, int64_t p0, int64_t p1,
           const Finish& finish) const;
  // q_x as the path reads it, K padded to whole groups: +128 as bytes (VNNI), 16-bit (AVX2) or
  // as is (scalar), in `out`.
  const void* prepare(const int8_t* qx, int64_t m, std::vector<int8_t>& out) const;
  template <typename Finish>
  void for_each_part(const void* prepared, int64_t m, int64_t parts, const Finish& finish) const;
  // multiply()'s epilogues over the parts, from x prepared for the path.
  void finish_parts(const void* prepared, const float* scale_x, int64_t m, const float* bias,
                    float* y, int64_t ldy, bool accumulate, int64_t parts) const;

  int64_t n_ = 0, k_ = 0, groups_ = 0, panels_ = 0;
  Path path_ = Path::Scalar;
  Isa isa_ = Isa::Scalar;                        // quantize_rows's
  std::vector<int8_t, Aligned64<int8_t>> data_;  // [panels, groups, 16, 4]
  std::vector<float> scale_;                     // [panels * 16], zero past N
  std::vector<int32_t> compensate_;  // [panels * 16]: 128 sum_k q_w[n, k], for the VNNI path
};

}  // namespace attnkit::kernels::int8
