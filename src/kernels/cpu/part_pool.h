#pragma once

// Private to src/kernels: the threads that run a kernel's parts (row_parts.h).
//
// Why it exists: starting and joining a std::thread costs about 30 us, and a Transformer's
// training step and decoding step each run dozens of products split between threads; the
// profile of training showed 3-4 % of the time in the kernel's thread creation. Workers that
// stay, spin briefly after a job and then sleep, take a part within a few microseconds, which
// also lets a one-row decoding product be split along its columns.

#include <cstdint>
#include <functional>

namespace attnkit::kernels {

// Runs part(0) .. part(parts - 1) on the calling thread and the pool's workers, each thread
// claiming the next part left (the caller first, so it usually runs part 0; a part a worker has
// not started by the time the caller is done with its own, the caller runs), and returns once all
// have run. Returns false, having run nothing, when another thread's job holds the pool (the
// caller then starts threads of its own). `part` must not throw, nor depend on the thread it
// runs on.
bool run_parts_on_pool(int64_t parts, const std::function<void(int64_t)>& part);

}  // namespace attnkit::kernels
