#include "attnkit/kernels/lanes.h"

#include <ATen/Parallel.h>
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>

#include "attnkit/core/info.h"
#include "lane_helpers.h"
#include "row_parts.h"

namespace attnkit::kernels {
namespace {

// One run_lanes call's threads that have finished their lanes, and the one job at a time that a
// lane still running gives them. A job's state is one word: its generation (upper 32 bits), its
// parts (16) and the next part nobody has claimed (16). A helper claims a part by a
// compare-exchange on that word, so a claim can only succeed while its job is posted; and the job
// stays posted, its `part_` unchanged, until every claimed part is done.
class Helpers {
 public:
  explicit Helpers(int64_t threads) : running_(threads) {}

  int64_t idle() const { return idle_.load(std::memory_order_acquire); }

  void run(int64_t parts, const std::function<void(int64_t)>& part) {
    std::unique_lock<std::mutex> slot(slot_, std::try_to_lock);
    if (!slot.owns_lock() || parts > kMaxParts) {  // another lane's job has the helpers
      for (int64_t j = 0; j < parts; ++j) part(j);
      return;
    }
    part_ = &part;
    done_.store(0, std::memory_order_relaxed);
    const uint64_t generation = ++generation_;
    state_.store(generation << 32 | static_cast<uint64_t>(parts) << 16, std::memory_order_release);
    for (int64_t j; (j = claim(generation)) >= 0; done_.fetch_add(1, std::memory_order_acq_rel))
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
      const uint64_t generation = state_.load(std::memory_order_acquire) >> 32;
      const int64_t j = generation ? claim(generation) : -1;
      if (j < 0) {
        _mm_pause();
        continue;
      }
      (*part_)(j);  // the job cannot end before this part is done
      done_.fetch_add(1, std::memory_order_acq_rel);
    }
  }

 private:
  static constexpr int64_t kMaxParts = 0xffff;

  // The next part of job `generation`, or -1 when that job is over or has no part left.
  int64_t claim(uint64_t generation) {
    uint64_t s = state_.load(std::memory_order_acquire);
    for (;;) {
      const auto next = static_cast<int64_t>(s & 0xffff),
                 parts = static_cast<int64_t>((s >> 16) & 0xffff);
      if (s >> 32 != generation || next >= parts) return -1;
      if (state_.compare_exchange_weak(s, s + 1, std::memory_order_acq_rel)) return next;
    }
  }

  std::atomic<int64_t> running_, idle_{0};  // threads still running lanes; threads done
  std::mutex slot_;                         // held by the lane whose job is posted
  uint64_t generation_ = 0;                 // written under slot_
  const std::function<void(int64_t)>* part_ = nullptr;
  std::atomic<int64_t> done_{0};
  std::atomic<uint64_t> state_{0};
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
