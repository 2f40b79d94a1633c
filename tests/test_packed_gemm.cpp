// The packed-weight product (src/kernels/packed_gemm.h) against LibTorch's matmul in double.

#include "kernels/gemm/packed_gemm.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <tuple>

namespace {

using attnkit::kernels::cpu_isa;
using attnkit::kernels::Isa;
using attnkit::kernels::supported_isas;
using attnkit::kernels::packed::Panels;

template <typename T>
at::ScalarType type_of() {
  return std::is_same_v<T, float> ? at::kFloat : at::kDouble;
}

// y = x op(B) with x and y inside wider buffers (rows ldx and ldy apart), over an existing y
// when accumulating; checked against the double-precision product.
template <typename T>
void check(int64_t m, int64_t n, int64_t k, bool transposed, bool accumulate, Isa isa,
           bool x_transposed = false) {
  SCOPED_TRACE(::testing::Message() << "m " << m << " n " << n << " k " << k << " transposed "
                                    << transposed << " accumulate " << accumulate << " "
                                    << to_string(isa) << (x_transposed ? " x transposed" : ""));
  at::manual_seed(m * 1000 + n * 10 + k);
  const auto opts = at::TensorOptions().dtype(type_of<T>());
  const int64_t ldx = k + 3, ldy = n + 5, ldb = (transposed ? k : n) + 2;
  // x [m, K] is read from rows ldx apart, or as the transpose of a [K, ldx'] matrix.
  auto x =
      x_transposed ? at::randn({k, m + 3}, opts).narrow(1, 0, m).t() : at::randn({m, ldx}, opts);
  auto y = at::randn({m, ldy}, opts);
  auto b = transposed ? at::randn({n, ldb}, opts) : at::randn({k, ldb}, opts);
  auto opb = transposed ? b.narrow(1, 0, k).t() : b.narrow(1, 0, n);  // [K, N]
  auto expected = at::matmul(x.narrow(1, 0, k).to(at::kDouble), opb.to(at::kDouble));
  if (accumulate) expected += y.narrow(1, 0, n).to(at::kDouble);
  auto untouched = y.narrow(1, n, ldy - n).clone();
  const auto panels = transposed
                          ? Panels<T>::transposed(b.template data_ptr<T>(), n, k, ldb, {1, 1, isa})
                          : Panels<T>::plain(b.template data_ptr<T>(), k, n, ldb, {1, 1, isa});
  panels.multiply(x.template data_ptr<T>(), m, x.stride(0), y.template data_ptr<T>(), ldy,
                  accumulate, x.stride(1));
  const double tol = std::is_same_v<T, float> ? 1e-4 * std::sqrt(double(k) + 1) : 1e-12;
  EXPECT_TRUE(at::allclose(y.narrow(1, 0, n).to(at::kDouble), expected, tol, tol))
      << (y.narrow(1, 0, n).to(at::kDouble) - expected).abs().max().template item<double>();
  EXPECT_TRUE(at::equal(y.narrow(1, n, ldy - n), untouched)) << "wrote past the N columns";
}

TEST(PackedGemm, MatchesMatmulAtEveryEdge) {
  // Rows around the 6- and 8-row blocks, columns around the 16- and 32-column panels, short
  // and long sums, on every block this CPU runs.
  for (Isa isa : supported_isas())
    for (int64_t m : {1, 2, 3, 5, 6, 7, 8, 9, 17})
      for (int64_t n : {1, 15, 16, 17, 31, 32, 33, 70, 130})
        for (int64_t k : {1, 3, 64})
          for (bool transposed : {true, false})
            for (bool accumulate : {false, true}) {
              check<float>(m, n, k, transposed, accumulate, isa);
              if (isa == Isa::Scalar) check<double>(m, n, k, transposed, accumulate, isa);
            }
}

// W packed as op(B) = W^T (8 x 8 blocks through registers, then the edges) holds the same bits as
// W^T packed as it lies, scale included: the two give equal products, at sizes around the blocks.
TEST(PackedGemm, TransposedPackingEqualsPlainPackingOfTheTranspose) {
  at::manual_seed(12);
  for (Isa isa : supported_isas())
    for (int64_t n : {7, 8, 33, 45})
      for (int64_t k : {5, 8, 13, 64}) {
        SCOPED_TRACE(::testing::Message() << to_string(isa) << " n " << n << " k " << k);
        const int64_t ldw = k + 3, m = 9;
        auto w = at::randn({n, ldw}), x = at::randn({m, k});
        const auto wt = w.narrow(1, 0, k).t().contiguous();  // [k, n]
        const float alpha = 0.37f;
        auto a = at::empty({m, n}), b = at::empty({m, n});
        Panels<float>::transposed(w.data_ptr<float>(), n, k, ldw, {alpha, 1, isa})
            .multiply(x.data_ptr<float>(), m, k, a.data_ptr<float>(), n, false);
        Panels<float>::plain(wt.data_ptr<float>(), k, n, n, {alpha, 1, isa})
            .multiply(x.data_ptr<float>(), m, k, b.data_ptr<float>(), n, false);
        EXPECT_TRUE(at::equal(a, b));
      }
}

// B packed by several threads, each a block of its rows, holds the same bits as packed by one: the
// same products, whether the rows split evenly or not, and with a part's block shorter than 8.
TEST(PackedGemm, PlainPackingSplitBetweenThreadsEqualsOneThread) {
  at::manual_seed(13);
  for (Isa isa : supported_isas())
    for (int64_t k : {16, 37, 300}) {
      const int64_t n = 70, ldb = n + 2, m = 9;
      auto b = at::randn({k, ldb}), x = at::randn({m, k});
      auto one = at::empty({m, n});
      Panels<float>::plain(b.data_ptr<float>(), k, n, ldb, {0.5, 1, isa})
          .multiply(x.data_ptr<float>(), m, k, one.data_ptr<float>(), n, false);
      for (int64_t parts : {2, 3}) {
        auto split = at::empty({m, n});
        Panels<float>::plain(b.data_ptr<float>(), k, n, ldb, {0.5, parts, isa})
            .multiply(x.data_ptr<float>(), m, k, split.data_ptr<float>(), n, false);
        EXPECT_TRUE(at::equal(one, split)) << to_string(isa) << " k " << k << " parts " << parts;
      }
    }
}

// B read where it lies (Panels::in_place) gives the bits of B packed (Panels::plain), as
// fused attention relies on: rows for the wide kernels (1-3) and the blocks, x as it lies and
// transposed, a sum longer than one slice, and the blocks of K and V attention takes (a range of
// B's rows, a range of whole panels). A B whose columns do not fill whole panels, or a scale, is
// packed instead, with the same bits.

TEST(PackedGemm, InPlaceEqualsPackedBitForBit) {
  at::manual_seed(14);
  for (Isa isa : supported_isas()) {
    const int64_t width = isa == Isa::Avx512 ? 32 : 16;
    for (int64_t n : {width, 4 * width, 2 * width + 5})
      for (int64_t m : {1, 2, 3, 9, 100})
        for (int64_t k : {7, 300})
          for (bool x_transposed : {false, true}) {
            SCOPED_TRACE(::testing::Message() << to_string(isa) << " n " << n << " m " << m << " k "
                                              << k << " x transposed " << x_transposed);
            const int64_t ldb = n + 3;
            auto b = at::randn({k, ldb});
            auto x = x_transposed ? at::randn({k, m + 2}).narrow(1, 0, m).t() : at::randn({m, k});
            const float* bp = b.data_ptr<float>();
            const auto packed = Panels<float>::plain(bp, k, n, ldb, {1, 1, isa});
            const auto in_place = Panels<float>::in_place(bp, k, n, ldb, {1, 1, isa});
            auto a = at::randn({m, n}), c = a.clone();
            packed.multiply(x.data_ptr<float>(), m, x.stride(0), a.data_ptr<float>(), n,
                            /*accumulate=*/true, x.stride(1));
            in_place.multiply(x.data_ptr<float>(), m, x.stride(0), c.data_ptr<float>(), n,
                              /*accumulate=*/true, x.stride(1));
            EXPECT_TRUE(at::equal(a, c));
            // x times rows [k0, k1) and the columns from the second panel on (if any).
            const int64_t k0 = k / 3, k1 = k - 1, col = n > width ? width : 0, cols = n - col;
            auto e = at::zeros({m, cols}), f = at::zeros({m, cols});
            packed.multiply_block(x.data_ptr<float>(), m, x.stride(0), e.data_ptr<float>(), cols,
                                  false, x.stride(1), k0, k1, col, n);
            in_place.multiply_block(x.data_ptr<float>(), m, x.stride(0), f.data_ptr<float>(), cols,
                                    false, x.stride(1), k0, k1, col, n);
            EXPECT_TRUE(at::equal(e, f));
          }
    // Rows 4 KiB apart are packed (packed_gemm.h): a change to B after in_place shows only in
    // panels that read it where it lies.
    for (int64_t ldb : {width, int64_t{1024}}) {
      auto b = at::randn({6, ldb}), x = at::randn({2, 6}), y = at::empty({2, width});
      const auto before = b.narrow(1, 0, width).clone();
      const auto panels = Panels<float>::in_place(b.data_ptr<float>(), 6, width, ldb, {1, 1, isa});
      b.mul_(2);
      panels.multiply(x.data_ptr<float>(), 2, 6, y.data_ptr<float>(), width, false);
      const auto read = ldb == width ? before * 2 : before;
      EXPECT_TRUE(at::allclose(y, at::mm(x, read), 1e-5, 1e-5)) << to_string(isa) << " ldb " << ldb;
    }
    // A scale cannot ride on B as it lies: packed, scaled, the same as plain's.
    auto b = at::randn({20, width}), x = at::randn({5, 20});
    auto a = at::empty({5, width}), c = at::empty({5, width});
    Panels<float>::plain(b.data_ptr<float>(), 20, width, width, {0.3, 1, isa})
        .multiply(x.data_ptr<float>(), 5, 20, a.data_ptr<float>(), width, false);
    Panels<float>::in_place(b.data_ptr<float>(), 20, width, width, {0.3, 1, isa})
        .multiply(x.data_ptr<float>(), 5, 20, c.data_ptr<float>(), width, false);
    EXPECT_TRUE(at::equal(a, c)) << to_string(isa) << " scaled";
  }
}

// x read as the transpose of a row-major matrix: a weight gradient dy^T x, summed over more rows
// than one pass takes.
TEST(PackedGemm, TransposedRowsOfX) {
  for (Isa isa : supported_isas()) {
    check<float>(13, 40, 9, false, false, isa, true);
    check<float>(8, 33, 64, true, true, isa, true);
    check<float>(21, 70, 600, false, true, isa, true);  // sums taken 256 at a time
  }
}

// More rows than one row block (96) and a sum longer than one slice (256): the rows of each
// block stream x from L2 in turn, and every element is still one sum in ascending k, so the
// product equals matmul and the rows alone give the same bits as in the whole.
TEST(PackedGemm, RowBlocksChangeNoResult) {
  at::manual_seed(9);
  for (Isa isa : supported_isas()) {
    check<float>(200, 70, 300, true, false, isa);
    check<float>(97, 33, 600, false, true, isa, true);
    const int64_t m = 203, n = 40, k = 300;
    auto x = at::randn({m, k}), w = at::randn({n, k});
    const auto panels = Panels<float>::transposed(w.data_ptr<float>(), n, k, k, {1, 1, isa});
    auto whole = at::empty({m, n}), part = at::empty({m, n});
    panels.multiply(x.data_ptr<float>(), m, k, whole.data_ptr<float>(), n, false);
    for (int64_t from : {0, 95, 96, 190}) {  // starting inside and at a block's edge
      const int64_t rows = std::min<int64_t>(13, m - from);
      panels.multiply(x.data_ptr<float>() + from * k, rows, k, part.data_ptr<float>(), n, false);
      EXPECT_TRUE(at::equal(part.narrow(0, 0, rows), whole.narrow(0, from, rows)))
          << to_string(isa) << ", rows from " << from;
    }
  }
}

// More columns than one column block (AVX2 takes 256 at a time around its row blocks): equal to
// matmul, and each column range alone gives the same bits as in the whole, with rows across a
// row block's edge and a sum longer than one slice.
TEST(PackedGemm, ColumnBlocksChangeNoResult) {
  at::manual_seed(10);
  for (Isa isa : supported_isas()) {
    check<float>(101, 530, 300, true, true, isa);
    check<float>(7, 300, 64, false, false, isa);
    const int64_t m = 110, n = 600, k = 300;
    auto x = at::randn({m, k}), w = at::randn({n, k});
    const auto panels = Panels<float>::transposed(w.data_ptr<float>(), n, k, k, {1, 1, isa});
    auto whole = at::empty({m, n});
    panels.multiply(x.data_ptr<float>(), m, k, whole.data_ptr<float>(), n, false);
    for (auto [from, to] :
         {std::pair<int64_t, int64_t>{0, 256}, {256, 600}, {512, 600}, {64, 320}}) {
      auto part = at::empty({m, to - from});
      panels.multiply_block(x.data_ptr<float>(), m, k, part.data_ptr<float>(), to - from, false,
                            /*kstride=*/1, /*k_begin=*/0, /*k_end=*/k, from, to);
      EXPECT_TRUE(at::equal(part, whole.narrow(1, from, to - from)))
          << to_string(isa) << ", columns " << from << " to " << to;
    }
  }
}

// Products used once: packed by two threads, rows split between three; bit-identical to one
// thread's product.
TEST(PackedGemm, ParallelPackingAndRowsChangeNothing) {
  at::manual_seed(8);
  const int64_t m = 45, n = 70, k = 300;
  auto x = at::randn({m, k}), w = at::randn({n, k});
  auto one = at::empty({m, n}), three = at::empty({m, n});
  Panels<float>::transposed(w.data_ptr<float>(), n, k, k)
      .multiply(x.data_ptr<float>(), m, k, one.data_ptr<float>(), n, false);
  Panels<float>::transposed(w.data_ptr<float>(), n, k, k, {1, 2})
      .multiply_parallel(x.data_ptr<float>(), m, k, three.data_ptr<float>(), n, false, 1, 3);
  EXPECT_TRUE(at::equal(one, three));
  EXPECT_TRUE(at::allclose(one, at::matmul(x, w.t()), 1e-3, 1e-3));
  // Too few rows for the parts: they split the columns instead.
  for (int64_t rows : {1, 3, 9}) {
    auto alone = at::empty({rows, n}), split = at::empty({rows, n});
    Panels<float>::transposed(w.data_ptr<float>(), n, k, k)
        .multiply(x.data_ptr<float>(), rows, k, alone.data_ptr<float>(), n, false);
    Panels<float>::transposed(w.data_ptr<float>(), n, k, k)
        .multiply_parallel(x.data_ptr<float>(), rows, k, split.data_ptr<float>(), n, false, 1, 3);
    EXPECT_TRUE(at::equal(alone, split)) << rows << " rows";
  }
}

TEST(PackedGemm, DecoderShapes) {
  check<float>(64, 768, 256, true, true, cpu_isa());
  check<float>(32, 256, 768, false, false, cpu_isa());
}

// Streamed panels (PackOptions::streamed: a model's weights in decoding) prefetch the next panel
// as a panel's first row block reads it; nothing else changes, so every product gives the same
// bits as the same panels not streamed: wide rows, every partial row block, several row blocks
// (kRowBlock) and column blocks (AVX2's 256 columns), sums past kDepth, the right edge, a bias,
// accumulating, and a column range whose last panel is not the matrix's.
TEST(PackedGemm, StreamedPanelsGiveTheSameBits) {
  at::manual_seed(15);
  for (Isa isa : supported_isas())
    for (int64_t m : {1, 3, 5, 8, 13, 100, 203})
      for (int64_t n : {70, 300})
        for (int64_t k : {7, 300}) {
          SCOPED_TRACE(::testing::Message()
                       << to_string(isa) << " m " << m << " n " << n << " k " << k);
          auto x = at::randn({m, k}), w = at::randn({n, k}), bias = at::randn({n});
          auto y0 = at::randn({m, n});
          const float* wp = w.data_ptr<float>();
          const auto kept = Panels<float>::transposed(wp, n, k, k, {1, 1, isa});
          const auto streamed = Panels<float>::transposed(wp, n, k, k, {1, 1, isa, true});
          for (bool accumulate : {false, true}) {
            auto a = y0.clone(), b = y0.clone();
            kept.multiply(x.data_ptr<float>(), m, k, a.data_ptr<float>(), n, accumulate, 1,
                          bias.data_ptr<float>());
            streamed.multiply(x.data_ptr<float>(), m, k, b.data_ptr<float>(), n, accumulate, 1,
                              bias.data_ptr<float>());
            EXPECT_TRUE(at::equal(a, b)) << "accumulate " << accumulate;
          }
          const int64_t col = kept.width(), cols = n - 2 * col;  // panels 1 .. before the last
          auto e = at::zeros({m, cols}), f = at::zeros({m, cols});
          kept.multiply_block(x.data_ptr<float>(), m, k, e.data_ptr<float>(), cols, false, 1, 0, k,
                              col, col + cols);
          streamed.multiply_block(x.data_ptr<float>(), m, k, f.data_ptr<float>(), cols, false, 1, 0,
                                  k, col, col + cols);
          EXPECT_TRUE(at::equal(e, f)) << "columns " << col << " to " << col + cols;
        }
}

// A kernel gives each thread every P-th row; the rows must come out bit-identical to the
// product of all rows at once, or results would depend on the thread count.
TEST(PackedGemm, RowSplitIsBitIdentical) {
  at::manual_seed(3);
  const int64_t m = 29, n = 50, k = 37;
  auto x = at::randn({m, k}), w = at::randn({n, k});
  const auto panels = Panels<float>::transposed(w.data_ptr<float>(), n, k, k);
  auto whole = at::empty({m, n}), split = at::empty({m, n});
  panels.multiply(x.data_ptr<float>(), m, k, whole.data_ptr<float>(), n, false);
  for (int64_t parts : {2, 3})
    for (int64_t j = 0; j < parts; ++j)
      panels.multiply(x.data_ptr<float>() + j * k, (m - j + parts - 1) / parts, parts * k,
                      split.data_ptr<float>() + j * n, parts * n, false);
  EXPECT_TRUE(at::equal(whole, split));
}

// One to three rows take several panels at once (the wide blocks), more rows the 8-row blocks
// one panel at a time, sums over 256 in slices: a row's result must not depend on which.
TEST(PackedGemm, FewRowsAreBitIdenticalToManyRows) {
  at::manual_seed(5);
  const int64_t m = 12, n = 300, k = 300;
  auto x = at::randn({m, k}), w = at::randn({n, k}), y0 = at::randn({m, n});
  for (Isa isa : supported_isas()) {
    SCOPED_TRACE(to_string(isa));
    const auto panels = Panels<float>::transposed(w.data_ptr<float>(), n, k, k, {1, 1, isa});
    for (bool accumulate : {false, true}) {
      auto whole = y0.clone();
      panels.multiply(x.data_ptr<float>(), m, k, whole.data_ptr<float>(), n, accumulate);
      for (int64_t rows : {1, 2, 3}) {
        auto split = y0.clone();
        for (int64_t i = 0; i < m; i += rows)
          panels.multiply(x.data_ptr<float>() + i * k, std::min(rows, m - i), k,
                          split.data_ptr<float>() + i * n, n, accumulate);
        EXPECT_TRUE(at::equal(whole, split)) << rows << " rows at a time";
      }
    }
  }
}

// A bias that starts the sums gives the bits of the bias copied into y and accumulated onto, on
// every block (wide rows, 8- and 6-row blocks, the right edge, sums past kDepth), on the parts'
// column and row splits, and in double; K = 0 leaves the bias.
TEST(PackedGemm, BiasStartIsTheBiasCopiedThenAccumulated) {
  at::manual_seed(6);
  for (Isa isa : supported_isas())
    for (int64_t m : {1, 2, 3, 8, 13})
      for (int64_t n : {17, 70})
        for (int64_t k : {0, 5, 300}) {
          SCOPED_TRACE(::testing::Message()
                       << to_string(isa) << " m " << m << " n " << n << " k " << k);
          auto x = at::randn({m, k + 1}), w = at::randn({n, k + 1}), bias = at::randn({n});
          const auto panels =
              Panels<float>::transposed(w.data_ptr<float>(), n, k, k + 1, {1, 1, isa});
          auto copied = bias.repeat({m, 1}).contiguous();
          panels.multiply(x.data_ptr<float>(), m, k + 1, copied.data_ptr<float>(), n,
                          /*accumulate=*/true);
          auto started = at::randn({m, n}), parallel = at::randn({m, n});
          panels.multiply(x.data_ptr<float>(), m, k + 1, started.data_ptr<float>(), n,
                          /*accumulate=*/false, /*kstride=*/1, bias.data_ptr<float>());
          panels.multiply_parallel(x.data_ptr<float>(), m, k + 1, parallel.data_ptr<float>(), n,
                                   /*accumulate=*/false, /*kstride=*/1, /*parts=*/2,
                                   bias.data_ptr<float>());
          EXPECT_TRUE(at::equal(started, copied));
          EXPECT_TRUE(at::equal(parallel, copied));
          if (isa != Isa::Scalar) continue;
          auto xd = x.to(at::kDouble), wd = w.to(at::kDouble), bd = bias.to(at::kDouble);
          const auto dp = Panels<double>::transposed(wd.data_ptr<double>(), n, k, k + 1);
          auto dcopied = bd.repeat({m, 1}).contiguous(), dstarted = at::randn({m, n}, at::kDouble);
          dp.multiply(xd.data_ptr<double>(), m, k + 1, dcopied.data_ptr<double>(), n, true);
          dp.multiply(xd.data_ptr<double>(), m, k + 1, dstarted.data_ptr<double>(), n, false, 1,
                      bd.data_ptr<double>());
          EXPECT_TRUE(at::equal(dstarted, dcopied));
        }
}

TEST(PackedGemm, EmptyProducts) {
  auto w = at::randn({4, 3});
  const auto panels = Panels<float>::transposed(w.data_ptr<float>(), 4, 3, 3);
  auto y = at::full({1, 4}, 7.f);
  panels.multiply(nullptr, 0, 3, y.data_ptr<float>(), 4, false);  // no rows: nothing written
  EXPECT_TRUE(at::equal(y, at::full({1, 4}, 7.f)));
  const auto empty = Panels<float>::transposed(w.data_ptr<float>(), 4, 0, 3);  // K = 0
  empty.multiply(w.data_ptr<float>(), 1, 3, y.data_ptr<float>(), 4, false);
  EXPECT_TRUE(at::equal(y, at::zeros({1, 4})));
}

}  // namespace
