// The kernels' worker pool (src/kernels/part_pool.h): whatever the number of parts, and as the
// pool grows to a larger job, every part runs exactly once and has finished when run returns; a
// part its worker has not started, the caller runs.
// And the lanes' helpers (src/kernels/lane_helpers.h): a thread done with its lanes takes parts
// of the kernels of a lane still running, and the lane's results keep their bits.

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include <ATen/ATen.h>

#include "attnkit/core/info.h"
#include "attnkit/kernels/cpu/lanes.h"
#include "attnkit/kernels/ops/linear.h"
#include "kernels/cpu/lane_helpers.h"
#include "kernels/cpu/part_pool.h"
#include "kernels/cpu/row_parts.h"

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

// A part is claimed by the first thread that asks, not given to a worker: a worker that has not
// started by the time the caller is done with its own part leaves its part to the caller. Each job
// here starts a millisecond after the last, the worker asleep by then (it sleeps after 200 us
// idle), and its first part is empty: the caller finishes it long before a sleeping worker wakes,
// and must have run the second part itself in some of fifty jobs. With parts fixed to threads it
// never did.
TEST(PartPool, TheCallerRunsAPartItsWorkerHasNotStarted) {
  int callers_second_parts = 0;
  for (int job = 0; job < 50; ++job) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    std::vector<std::thread::id> ran(2);
    std::vector<std::atomic<int>> runs(2);
    ASSERT_TRUE(run_parts_on_pool(2, [&](int64_t i) {
      runs[i].fetch_add(1);
      ran[i] = std::this_thread::get_id();
    }));
    ASSERT_EQ(runs[0].load(), 1);
    ASSERT_EQ(runs[1].load(), 1);
    callers_second_parts += ran[1] == std::this_thread::get_id();
  }
  EXPECT_GT(callers_second_parts, 0);
}

// Spins until done() or about five seconds have passed; returns done().
template <typename Done>
bool wait_for(const Done& done) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!done() && std::chrono::steady_clock::now() < until) std::this_thread::yield();
  return done();
}

// Two lanes on two threads, lane 0 empty: once its thread is idle, lane 1's kernels may take two
// parts, and the idle thread runs one of each job's (each part here waits for the other to
// start, so both must run at once). Twenty jobs in a row: each part of each runs exactly once.
TEST(LaneHelpers, AThreadDoneWithItsLanesTakesPartsOfTheOthers) {
  set_threads(2, ThreadPolicy::Kernels);
  int64_t idle_seen = -1, parts_seen = -1;
  std::vector<std::vector<std::thread::id>> ran(20, std::vector<std::thread::id>(2));
  std::vector<std::atomic<int>> runs(40);
  run_lanes(2, [&](int64_t lane) {
    if (lane == 0) return;
    ASSERT_TRUE(wait_for([] { return lane_helpers::idle() == 1; }));
    idle_seen = lane_helpers::idle();
    parts_seen = row_parts(/*rows=*/100);
    for (int job = 0; job < 20; ++job) {
      std::atomic<int> started{0};
      for_each_row_part(2, [&](RowPart part) {
        runs[job * 2 + part.first].fetch_add(1);
        ran[job][part.first] = std::this_thread::get_id();
        started.fetch_add(1);
        EXPECT_TRUE(wait_for([&] { return started.load() == 2; })) << "job " << job;
        EXPECT_EQ(row_parts(/*rows=*/100), 1) << "a part's own kernels stay on its thread";
      });
    }
  });
  set_threads(1);
  EXPECT_EQ(idle_seen, 1);
  EXPECT_EQ(parts_seen, 2);
  for (int job = 0; job < 20; ++job) {
    EXPECT_EQ(runs[job * 2].load(), 1) << job;
    EXPECT_EQ(runs[job * 2 + 1].load(), 1) << job;
    EXPECT_NE(ran[job][0], ran[job][1]) << "job " << job << " ran on one thread";
  }
}

// A lane's product and its gradients, computed with the other thread helping (lane 0 is empty),
// equal the same computed on one thread bit for bit: the products' pieces are the same sums
// however many threads share them.
TEST(LaneHelpers, ALanesProductsKeepTheirBitsWithHelpers) {
  at::manual_seed(11);
  const auto x0 = at::randn({300, 256}), w0 = at::randn({1024, 256}) * 0.05, b0 = at::randn({1024}),
             g = at::randn({300, 1024});
  auto pass = [&] {
    auto x = x0.clone().requires_grad_(), w = w0.clone().requires_grad_(),
         b = b0.clone().requires_grad_();
    auto y = linear(x, w, b);
    (y * g).sum().backward();
    return std::vector<at::Tensor>{y.detach(), x.grad(), w.grad(), b.grad()};
  };
  set_threads(1, ThreadPolicy::Kernels);
  const auto alone = pass();
  set_threads(2, ThreadPolicy::Kernels);
  std::vector<at::Tensor> helped;
  int64_t parts = 0;
  run_lanes(2, [&](int64_t lane) {
    if (lane == 0) return;
    ASSERT_TRUE(wait_for([] { return lane_helpers::idle() == 1; }));
    parts = row_parts(/*rows=*/300);
    helped = pass();
  });
  set_threads(1);
  EXPECT_EQ(parts, 2);
  ASSERT_EQ(helped.size(), alone.size());
  for (size_t i = 0; i < alone.size(); ++i) EXPECT_TRUE(alone[i].equal(helped[i])) << i;
}

}  // namespace
}  // namespace attnkit::kernels
