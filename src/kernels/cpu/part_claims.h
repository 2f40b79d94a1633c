#pragma once

// Private to src/kernels: the parts of one job at a time, claimed by whichever threads ask (the
// kernels' pool, part_pool.cpp; the lanes' helpers, lanes.cpp). The job's state is one word: its
// number (upper 32 bits), its parts (16) and the next part nobody has claimed (16). A thread
// claims a part by a compare-exchange on that word, so a claim can only succeed while its job is
// posted; the poster keeps the job (and what its parts read) in place until every claimed part is
// done, and only then posts the next.

#include <atomic>
#include <cstdint>

namespace attnkit::kernels {

class PartClaims {
 public:
  static constexpr int64_t kMaxParts = 0xffff;

  // Job `number` (not 0) with `parts` parts, none claimed; what the parts read must be written
  // before (the store releases it to a thread whose claim succeeds).
  void post(uint64_t number, int64_t parts) {
    state_.store(number << 32 | static_cast<uint64_t>(parts) << 16, std::memory_order_release);
  }

  // The number of the job posted last (0 before the first).
  uint64_t posted() const { return state_.load(std::memory_order_acquire) >> 32; }

  // The next part of job `number`, or -1 when that job is over or has no part left.
  int64_t claim(uint64_t number) {
    uint64_t s = state_.load(std::memory_order_acquire);
    for (;;) {
      const auto next = static_cast<int64_t>(s & 0xffff),
                 parts = static_cast<int64_t>((s >> 16) & 0xffff);
      if (s >> 32 != number || next >= parts) return -1;
      if (state_.compare_exchange_weak(s, s + 1, std::memory_order_acq_rel)) return next;
    }
  }

 private:
  std::atomic<uint64_t> state_{0};
};

}  // namespace attnkit::kernels
