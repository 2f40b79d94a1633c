#pragma once

// Private to src/kernels: a sorted batch's rows dealt out to threads for a whole sequence. In a
// batch sorted longest first, the rows running at any step are a prefix; part j of P owns
// positions j, j + P, j + 2P, ..., so every part keeps about 1/P of every step's prefix, and
// its rows of a step's buffer are every P-th row: one strided product per step and part, with
// no synchronisation between the parts until the sequence ends.

#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <thread>
#include <vector>

#include "attnkit/core/info.h"
#include "attnkit/kernels/cpu/one_part.h"
#include "lane_helpers.h"
#include "part_pool.h"

namespace attnkit::kernels {

struct RowPart {
  int64_t first = 0, stride = 1;  // positions first, first + stride, ...
  // How many of the first `rows` positions this part owns.
  int64_t count(int64_t rows) const {
    return rows > first ? (rows - first + stride - 1) / stride : 0;
  }
};

// How many parts to split `rows` rows into, at most one per row: the configured threads under
// ThreadPolicy::Kernels; otherwise the threads the caller gave LibTorch or OpenBLAS, whichever
// owns them, so that a caller running several single-threaded BLAS users side by side gets one
// part each. One inside a LibTorch parallel region, and one under OnePartPerThread, but for a
// lane whose run has threads done with their own lanes: one more part for each (lane_helpers.h).
inline int64_t row_parts(int64_t rows) {
  if (at::in_parallel_region()) return 1;
  if (OnePartPerThread::active())
    return std::max<int64_t>(1, std::min<int64_t>(1 + lane_helpers::idle(), rows));
  const int64_t threads = configured_policy() == ThreadPolicy::Kernels
                              ? configured_threads()
                              : std::max<int64_t>(at::get_num_threads(), blas_threads());
  return std::max<int64_t>(1, std::min(threads, rows));
}

// The same for a product of `flops` floating-point operations: starting and joining a thread
// costs about 30 us, so every part beyond the first must bring at least 8 MFLOP (30-60 us on one
// core) of work. At batch 1 the encoder's products are far smaller.
inline int64_t row_parts(int64_t rows, double flops) {
  return std::max<int64_t>(1,
                           std::min<int64_t>(row_parts(rows), static_cast<int64_t>(flops / 8e6)));
}

// fn(RowPart) for parts 0..parts-1, the caller running part 0, on threads of attnkit's own
// (part_pool.h): under ThreadPolicy::Kernels neither LibTorch's pool nor OpenBLAS's has a
// thread to spare, and their idle workers would spin on the cores the parts need.
template <typename Fn>
void for_each_row_part(int64_t parts, const Fn& fn) {
  std::vector<std::exception_ptr> errors(parts);
  auto run = [&](int64_t j) {
    OnePartPerThread nested;  // a part's own products stay on its thread
    try {
      fn(RowPart{j, parts});
    } catch (...) {
      errors[j] = std::current_exception();
    }
  };
  if (parts > 1 && (lane_helpers::run(parts, run) || run_parts_on_pool(parts, run))) {
    for (const auto& error : errors)
      if (error) std::rethrow_exception(error);
    return;
  }
  std::vector<std::thread> helpers;  // the pool is busy with another caller's job
  for (int64_t j = 1; j < parts; ++j) helpers.emplace_back(run, j);
  run(0);
  for (auto& helper : helpers) helper.join();
  for (const auto& error : errors)
    if (error) std::rethrow_exception(error);
}

// fn(t) for every task t in [0, tasks), `parts` threads (the caller one of them) each claiming
// the next task left until none is: a thread that runs slower or starts later takes fewer. Two
// threads given halves of a product's rows finished apart by 5-10 % of it in a training step,
// the same work running at different speeds from one job to the next (one vCPU interrupted, the
// other reading what it wrote last); the other waited. The tasks' results must not depend on
// which thread runs them.
template <typename Fn>
void for_each_task(int64_t parts, int64_t tasks, const Fn& fn) {
  std::atomic<int64_t> next{0};
  for_each_row_part(std::max<int64_t>(1, std::min(parts, tasks)), [&](RowPart) {
    for (int64_t t; (t = next.fetch_add(1, std::memory_order_relaxed)) < tasks;) fn(t);
  });
}

// The least element-wise work worth a part of its own: 16 Ki elements, a few microseconds on one
// core. The pool's workers spin between the jobs of a step (part_pool.h), so a worker takes a
// part about as fast. At 64 Ki a Transformer training batch of ~500 target tokens x 256 left its
// layer norms, dropouts and column sums on one thread: the caller ran alone for 19.7 % of its
// samples (checkpoint writes aside) and waited 4.8 % for its worker; at 16 Ki, 14.3 % and 6.7 %
// (two threads, Zen 5; beam decoding unchanged).
constexpr int64_t kElementsPerPart = 1 << 14;

// fn(from, to) over [0, n) in contiguous ranges, one per thread part, for element-wise work. A
// part's range starts on a multiple of 16, so every part but the last runs whole vectors; when
// each element's result depends only on its index, the split changes nothing. A part must bring
// kElementsPerPart elements; an index that stands for `per_index` elements (a column of a
// matrix's column sums) counts as that many.
template <typename Fn>
void for_each_range(int64_t n, const Fn& fn, int64_t per_index = 1) {
  const int64_t parts =
      std::max<int64_t>(1, std::min(row_parts(n), n * per_index / kElementsPerPart));
  if (parts == 1) return fn(int64_t{0}, n);
  for_each_row_part(parts, [&](RowPart part) {
    auto edge = [&](int64_t j) { return std::min(n, n * j / parts / 16 * 16); };
    fn(edge(part.first), part.first + 1 == parts ? n : edge(part.first + 1));
  });
}

// fn(from, to) over rows [0, rows) in contiguous blocks, one per thread part, for rows whose
// results depend on that row alone (so the split changes nothing). As for for_each_range, a part
// must bring kElementsPerPart elements of work, a row counting as `per_row`; unlike it, blocks
// start on any row, since a step's rows are few and each is long.
template <typename Fn>
void for_each_row_block(int64_t rows, int64_t per_row, const Fn& fn) {
  const int64_t parts =
      std::max<int64_t>(1, std::min(row_parts(rows), rows * per_row / kElementsPerPart));
  if (parts == 1) return fn(int64_t{0}, rows);
  for_each_row_part(
      parts, [&](RowPart part) { fn(rows * part.first / parts, rows * (part.first + 1) / parts); });
}

// fn(t, from, to) over the elements of several tensors (sizes[t] each) taken as one range and
// split as for_each_range splits it: [from, to) is a piece of tensor t. One hand-off for a whole
// optimizer step instead of one per parameter, most of which are too small to split.
template <typename Fn>
void for_each_piece(const std::vector<int64_t>& sizes, const Fn& fn) {
  std::vector<int64_t> start(sizes.size() + 1, 0);  // start[t]: tensor t's first index
  for (size_t t = 0; t < sizes.size(); ++t) start[t + 1] = start[t] + sizes[t];
  for_each_range(start.back(), [&](int64_t from, int64_t to) {
    for (size_t t = std::upper_bound(start.begin(), start.end(), from) - start.begin() - 1;
         t < sizes.size() && start[t] < to; ++t) {
      const int64_t lo = std::max(from, start[t]), hi = std::min(to, start[t + 1]);
      if (lo < hi) fn(t, lo - start[t], hi - start[t]);
    }
  });
}

}  // namespace attnkit::kernels
