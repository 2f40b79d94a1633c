#pragma once

// Private to src/kernels: a sorted batch's rows dealt out to threads for a whole sequence. In a
// batch sorted longest first, the rows running at any step are a prefix; part j of P owns
// positions j, j + P, j + 2P, ..., so every part keeps about 1/P of every step's prefix, and
// its rows of a step's buffer are every P-th row: one strided product per step and part, with
// no synchronisation between the parts until the sequence ends.

#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdint>
#include <exception>
#include <thread>
#include <vector>

#include "attnkit/core/info.h"

namespace attnkit::kernels {

struct RowPart {
  int64_t first = 0, stride = 1;  // positions first, first + stride, ...
  // How many of the first `rows` positions this part owns.
  int64_t count(int64_t rows) const {
    return rows > first ? (rows - first + stride - 1) / stride : 0;
  }
};

// How many parts to split `rows` rows into: the threads the caller gave LibTorch or OpenBLAS,
// whichever owns them (attnkit::ThreadPolicy), at most one per row; one inside a parallel
// region, or where callers run several single-threaded BLAS users side by side.
inline int64_t row_parts(int64_t rows) {
  if (at::in_parallel_region()) return 1;
  const int64_t threads = std::max<int64_t>(at::get_num_threads(), blas_threads());
  return std::max<int64_t>(1, std::min(threads, rows));
}

// fn(RowPart) for parts 0..parts-1, the caller running part 0. Threads of their own rather than
// a pool's: under ThreadPolicy::Blas, which training uses, LibTorch's pool has one thread, and
// OpenBLAS's workers are idle between products (attnkit::set_threads shortens their spin so
// that they sleep, rather than hold the cores, while the parts run).
template <typename Fn>
void for_each_row_part(int64_t parts, const Fn& fn) {
  std::vector<std::exception_ptr> errors(parts);
  auto run = [&](int64_t j) {
    try {
      fn(RowPart{j, parts});
    } catch (...) {
      errors[j] = std::current_exception();
    }
  };
  std::vector<std::thread> helpers;
  for (int64_t j = 1; j < parts; ++j) helpers.emplace_back(run, j);
  run(0);
  for (auto& helper : helpers) helper.join();
  for (const auto& error : errors)
    if (error) std::rethrow_exception(error);
}

}  // namespace attnkit::kernels
