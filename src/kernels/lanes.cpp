#include "attnkit/kernels/lanes.h"

#include <ATen/Parallel.h>

#include <algorithm>

#include "attnkit/core/info.h"
#include "row_parts.h"

namespace attnkit::kernels {

void run_lanes(int64_t lanes, const std::function<void(int64_t)>& fn) {
  const int64_t threads = std::max<int64_t>(1, std::min<int64_t>(lanes, configured_threads()));
  // for_each_row_part keeps each part's kernels on its thread and rethrows a part's exception.
  for_each_row_part(threads, [&](RowPart part) {
    at::init_num_threads();  // LibTorch's thread settings (one thread under the Kernels policy)
    for (int64_t lane = part.first; lane < lanes; lane += part.stride) fn(lane);
  });
}

}  // namespace attnkit::kernels
