#include "attnkit/kernels/ops/grad_norm.h"

#include <immintrin.h>

#include "../cpu/row_parts.h"
#include "../cpu/simd.h"

namespace attnkit::kernels {
namespace {

double squares_scalar(const float* x, int64_t n) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]) * x[i];
  return sum;
}

// Four double lanes, two accumulators: the order of the additions differs from the scalar loop's,
// by far less than float's precision.
__attribute__((target("avx2,fma"))) double squares_avx2(const float* x, int64_t n) {
  __m256d a = _mm256_setzero_pd(), b = _mm256_setzero_pd();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256d lo = _mm256_cvtps_pd(_mm_loadu_ps(x + i)),
                  hi = _mm256_cvtps_pd(_mm_loadu_ps(x + i + 4));
    a = _mm256_fmadd_pd(lo, lo, a);
    b = _mm256_fmadd_pd(hi, hi, b);
  }
  alignas(32) double lanes[4];
  _mm256_store_pd(lanes, _mm256_add_pd(a, b));
  return (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]) + squares_scalar(x + i, n - i);
}

}  // namespace

double sum_of_squares(const std::vector<FloatSpan>& spans) {
  struct Block {
    const float* data;
    int64_t size;
  };
  std::vector<Block> blocks;
  for (const auto& s : spans)
    for (int64_t i = 0; i < s.size; i += kNormBlock)
      blocks.push_back({s.data + i, std::min(kNormBlock, s.size - i)});
  std::vector<double> sums(blocks.size());
  for_each_range(
      static_cast<int64_t>(blocks.size()),
      [&](int64_t from, int64_t to) {
        for (int64_t j = from; j < to; ++j)
          sums[j] = simd::use_avx2() ? squares_avx2(blocks[j].data, blocks[j].size)
                                     : squares_scalar(blocks[j].data, blocks[j].size);
      },
      /*per_index=*/kNormBlock);
  double total = 0;
  for (double s : sums) total += s;
  return total;
}

void scale(const std::vector<FloatSpan>& spans, float factor) {
  std::vector<int64_t> sizes;
  for (const auto& s : spans) sizes.push_back(s.size);
  for_each_piece(sizes, [&](size_t t, int64_t from, int64_t to) {
    float* x = spans[t].data;
    for (int64_t i = from; i < to; ++i) x[i] *= factor;
  });
}

void add(const std::vector<FloatSpan>& dst, const std::vector<const float*>& src) {
  std::vector<int64_t> sizes;
  for (const auto& s : dst) sizes.push_back(s.size);
  for_each_piece(sizes, [&](size_t t, int64_t from, int64_t to) {
    simd::axpy(1.0f, src[t] + from, dst[t].data + from, to - from);  // a fused 1 * x + y is x + y
  });
}

}  // namespace attnkit::kernels
