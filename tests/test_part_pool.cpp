// The kernels' worker pool (src/kernels/part_pool.h): whatever the number of parts, and as the
// pool grows to a larger job, every part runs exactly once and has finished when run returns.

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "kernels/part_pool.h"

namespace attnkit::kernels {
namespace {

TEST(PartPool, EachPartRunsOnceAndIsDoneWhenTheJobReturnsAsThePoolGrows) {
  for (int64_t parts = 1; parts <= 6; ++parts) {
    for (int job = 0; job < 20; ++job) {
      std::vector<std::atomic<int>> started(parts), finished(parts);
      const bool ran = run_parts_on_pool(parts, [&](int64_t i) {
        started[i].fetch_add(1);
        if (i == parts - 1) std::this_thread::sleep_for(std::chrono::microseconds(50));
        finished[i].fetch_add(1);
      });
      ASSERT_TRUE(ran) << "the pool was free";
      for (int64_t i = 0; i < parts; ++i) {
        ASSERT_EQ(started[i].load(), 1) << "part " << i << " of " << parts << ", job " << job;
        ASSERT_EQ(finished[i].load(), 1) << "part " << i << " of " << parts << ", job " << job;
      }
    }
  }
}

}  // namespace
}  // namespace attnkit::kernels
