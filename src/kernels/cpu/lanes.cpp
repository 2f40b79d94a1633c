#include "attnkit/kernels/cpu/lanes.h"

#include <ATen/Parallel.h>
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>

#include "attnkit/core/info.h"
#include "lane_helpers.h"
#include "part_claims.h"
#include "row_parts.h"

namespace attnkit::kernels {
namespace {

// One run_lanes call's threads that have finished their lanes, and the one job at a time that a
// lane still running gives them, whose parts the lane and its helpers claim (part_claims.h).
class Helpers {
 public:
  explicit Helpers(int64_t threads) : running_(threads) {}

  int64_t idle() const { return idle_.load(std::memory_order_acquire); }

  void run(int64_t parts, const std::function<void(int64_t)>& part) {
    std::unique_lock<std::mutex> slot(slot_, std::try_to_lock);
    if (!slot.owns_lock() || parts > PartClaims::kMaxParts) {  // another lane's job has the helpers
      for (int64_t j = 0; j < parts; ++j) part(j);
      return;
    }
    part_ = &part;
    done_.store(0, std::memory_order_relaxed);
    const uint64_t generation = ++generation_;
    claims_.post(generation, parts);
    for (int64_t j; (j = claims_.claim(generation)) >= 0;
         done_.fetch_add(1, std::memory_order_acq_rel))
      part(j);
    while (done_.load(std::memory_order_acquire) < parts) _mm_pause();
  }

  // A thread whose lanes have all run: takes parts of the others' jobs until no lane runs. It
  // spins meanwhile, on a core this run would leave idle: the lanes left run for milliseconds, and
  // their products come between short serial stretches that a sleeping thread would wake too late
  // for.
  void help_until_done() {
    idle_.fetch_add(1, std::memory_order_acq_rel);
    running_.fetch_sub(1, std::memory_order_acq_rel);
    while (running_.load(std::memory_order_acquire) > 0) {
      const uint64_t generation = claims_.posted();
      const int64_t j = generation ? claims_.claim(generation) : -1;
      if (j < 0) {
        _mm_pause();
        continue;
      }
      (*part_)(j);  // the job cannot end before this part is done
      done_.fetch_add(1, std::memory_order_acq_rel);
    }
  }

 private:
  std::atomic<int64_t> running_, idle_{0};  // threads still running lanes; threads done
  std::mutex slot_;                         // held by the lane whose job is posted
  uint64_t generation_ = 0;                 // written under slot_
  const std::function<void(int64_t)>* part_ = nullptr;
  std::atomic<int64_t> done_{0};
  PartClaims claims_;
};

// The calling thread's run and the nesting of OnePartPerThread its lanes run at: deeper, the
// thread is inside a part of a kernel, whose own kernels stay on the thread.
thread_local Helpers* t_helpers = nullptr;
thread_local int t_lane_nesting = 0;

bool runs_a_lane() { return t_helpers && OnePartPerThread::nesting() == t_lane_nesting; }

}  // namespace

void run_lanes(int64_t lanes, const std::function<void(int64_t)>& fn) {
  const int64_t threads = std::max<int64_t>(1, std::min<int64_t>(lanes, configured_threads()));
  Helpers helpers(threads);
  // for_each_row_part keeps each part's kernels on its thread and rethrows a part's exception.
  for_each_row_part(threads, [&](RowPart part) {
    at::init_num_threads();  // LibTorch's thread settings (one thread under the Kernels policy)
    Helpers* outer = t_helpers;
    const int outer_nesting = t_lane_nesting;
    t_helpers = &helpers;
    t_lane_nesting = OnePartPerThread::nesting();
    std::exception_ptr error;
    try {
      for (int64_t lane = part.first; lane < lanes; lane += part.stride) fn(lane);
    } catch (...) {
      error = std::current_exception();
    }
    t_helpers = nullptr;  // its kernels' parts stay where they are
    helpers.help_until_done();
    t_helpers = outer;
    t_lane_nesting = outer_nesting;
    if (error) std::rethrow_exception(error);
  });
}

namespace lane_helpers {

int64_t idle() { return runs_a_lane() ? t_helpers->idle() : 0; }

bool run(int64_t parts, const std::function<void(int64_t)>& part) {
  if (!runs_a_lane()) return false;
  t_helpers->run(parts, part);
  return true;
}

}  // namespace lane_helpers
}  // namespace attnkit::kernels
