#pragma once

// Private to src/kernels: the threads of a run of lanes (lanes.h) that have run their own lanes,
// lent to the kernels of the lanes still running. A lane's kernels keep to its thread while every
// thread has a lane; once one thread is done, a lane's products share their parts with it. Why:
// on a 2-core VM whose cores ran 8-17 % apart (the packed block's 1024^3 product on both at
// once), two equal lanes left the faster core waiting 0.4-4.8 s of every 19-22 s of a
// Transformer's lanes; with the helpers a training step ran 7 % faster (the median of 18
// alternated pairs, bench/compare_transformer.py). The kernels' results do not depend on how
// many parts they are cut into, so neither do the lanes'.

#include <cstdint>
#include <functional>

namespace attnkit::kernels::lane_helpers {

// How many threads wait to help the calling thread's kernels: 0 unless it runs a lane itself
// (not a part of a kernel) and a thread of its run has finished its lanes.
int64_t idle();

// part(0) .. part(parts - 1) on the calling lane's thread and its idle helpers, each thread
// claiming the next part left; returns once all have run. False, having run nothing, unless the
// caller runs a lane (then for_each_row_part uses the pool). `part` must not throw.
bool run(int64_t parts, const std::function<void(int64_t)>& part);

}  // namespace attnkit::kernels::lane_helpers
