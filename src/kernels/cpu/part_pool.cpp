#include "part_pool.h"

#include <immintrin.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "part_claims.h"

namespace attnkit::kernels {
namespace {

// How long an idle worker spins before it sleeps: the gap between two products of a decoding
// step (a few LibTorch ops) is shorter, the gap between training steps longer.
constexpr auto kSpin = std::chrono::microseconds(200);

// One job at a time, whose parts every thread, the caller first, claims until none is left
// (part_claims.h), as the lanes' helpers claim theirs. Why claims and not part i on worker i: with
// a busy process sharing one of this machine's two cores, a Transformer trained in one lane spent
// 21 % of its samples with the caller waiting for a worker that had not yet been given the core
// to start its part; the caller now runs that part itself (16-29 % faster in that case).
class PartPool {
 public:
  ~PartPool() {
    {
      std::lock_guard<std::mutex> lock(sleep_);
      stop_ = true;
      generation_.fetch_add(1, std::memory_order_release);
    }
    wake_.notify_all();
    for (auto& w : workers_) w.join();
  }

  bool run(int64_t parts, const std::function<void(int64_t)>& part) {
    std::unique_lock<std::mutex> job(submit_, std::try_to_lock);
    if (!job.owns_lock() || parts > PartClaims::kMaxParts) return false;
    const uint64_t current = generation_.load(std::memory_order_relaxed);
    while (static_cast<int64_t>(workers_.size()) < parts - 1)
      workers_.emplace_back([this, current] { work(current); });
    part_ = &part;
    done_.store(0, std::memory_order_relaxed);
    const uint64_t number = ++jobs_;
    claims_.post(number, parts);
    {
      std::lock_guard<std::mutex> lock(sleep_);  // a worker between its check and its wait
      generation_.fetch_add(1, std::memory_order_release);
    }
    wake_.notify_all();
    for (int64_t j; (j = claims_.claim(number)) >= 0; done_.fetch_add(1, std::memory_order_acq_rel))
      part(j);
    while (done_.load(std::memory_order_acquire) < parts) _mm_pause();
    return true;
  }

 private:
  void work(uint64_t seen) {
    for (;;) {
      const auto until = std::chrono::steady_clock::now() + kSpin;
      uint64_t now = generation_.load(std::memory_order_acquire);
      for (int spins = 0; now == seen; now = generation_.load(std::memory_order_acquire)) {
        _mm_pause();
        if (++spins % 256 == 0 && std::chrono::steady_clock::now() > until) {
          std::unique_lock<std::mutex> lock(sleep_);
          wake_.wait(lock, [&] { return generation_.load(std::memory_order_acquire) != seen; });
        }
      }
      seen = now;
      if (stop_) return;
      // The job posted now (a later one than the wake-up's, if this worker slept through one).
      const uint64_t number = claims_.posted();
      for (int64_t j; (j = claims_.claim(number)) >= 0;
           done_.fetch_add(1, std::memory_order_acq_rel))
        (*part_)(j);  // the job cannot end before this part is done
    }
  }

  std::mutex submit_;  // one job at a time
  std::vector<std::thread> workers_;
  uint64_t jobs_ = 0;  // written under submit_
  // The job: written before claims_ posts it, read by a thread that has claimed one of its parts.
  const std::function<void(int64_t)>* part_ = nullptr;
  std::atomic<int64_t> done_{0};
  PartClaims claims_;
  std::atomic<uint64_t> generation_{0};  // moves on with each job, and to stop: wakes the workers
  std::mutex sleep_;
  std::condition_variable wake_;
  bool stop_ = false;
};

}  // namespace

bool run_parts_on_pool(int64_t parts, const std::function<void(int64_t)>& part) {
  static PartPool pool;
  return pool.run(parts, part);
}

}  // namespace attnkit::kernels
