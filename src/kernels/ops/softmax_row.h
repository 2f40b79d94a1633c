#pragma once

// Private to src/kernels (and the fused decoding step): the masked softmax of one row on raw
// memory, shared by kernels::masked_softmax, the training decoder kernel and FusedStep, so the
// rules for masked and empty rows live in one place.

#include <cmath>
#include <cstdint>

namespace attnkit::kernels {

// w[j] = softmax over the kept j of x (keep nullptr: every j), exactly 0 where not kept. A row
// with nothing kept is all zeros (no NaN); returns whether anything was kept. w may alias x.
template <typename T>
bool masked_softmax_row(const T* x, const bool* keep, T* w, int64_t n) {
  T best = 0;
  bool any = false;
  for (int64_t j = 0; j < n; ++j)
    if ((!keep || keep[j]) && (!any || x[j] > best)) best = x[j], any = true;
  T total = 0;
  for (int64_t j = 0; j < n; ++j)
    total += (w[j] = (!keep || keep[j]) ? std::exp(x[j] - best) : T(0));
  if (!any) return false;  // all zeros already
  for (int64_t j = 0; j < n; ++j) w[j] /= total;
  return true;
}

}  // namespace attnkit::kernels
