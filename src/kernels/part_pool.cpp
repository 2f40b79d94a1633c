#include "part_pool.h"

#include <immintrin.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

namespace attnkit::kernels {
namespace {

// How long an idle worker spins before it sleeps: the gap between two products of a decoding
// step (a few LibTorch ops) is shorter, the gap between training steps longer.
constexpr auto kSpin = std::chrono::microseconds(200);

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
    if (!job.owns_lock()) return false;
    // A new worker waits for the generation after the current one, this job's. Started from 0
    // once earlier jobs had run, it took the current generation for a job at once and read part_
    // and parts_ while they were being written below: it could run this job's part before it was
    // published and again after, with run() returning (and `part` gone) during the second run.
    const uint64_t current = generation_.load(std::memory_order_relaxed);
    while (static_cast<int64_t>(workers_.size()) < parts - 1) {
      const int64_t index = static_cast<int64_t>(workers_.size()) + 1;
      workers_.emplace_back([this, index, current] { work(index, current); });
    }
    part_ = &part;
    parts_ = parts;
    // Every worker checks in, those without a part too: none may still be reading this job's
    // fields when the next one writes them.
    remaining_.store(static_cast<int64_t>(workers_.size()), std::memory_order_relaxed);
    {
      std::lock_guard<std::mutex> lock(sleep_);  // a worker between its check and its wait
      generation_.fetch_add(1, std::memory_order_release);
    }
    wake_.notify_all();
    part(0);
    while (remaining_.load(std::memory_order_acquire) > 0) _mm_pause();
    return true;
  }

 private:
  void work(int64_t index, uint64_t seen) {
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
      if (index < parts_) (*part_)(index);
      remaining_.fetch_sub(1, std::memory_order_acq_rel);
    }
  }

  std::mutex submit_;  // one job at a time
  std::vector<std::thread> workers_;
  // The job: written before generation_ moves on, read by the workers after they see it move.
  const std::function<void(int64_t)>* part_ = nullptr;
  int64_t parts_ = 0;
  std::atomic<int64_t> remaining_{0};
  std::atomic<uint64_t> generation_{0};
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
