#include "batcher.h"

#include <chrono>

namespace attnkit::serve {

Batcher::Batcher(translate::Translator& translator, size_t max_batch, double window_ms)
    : translator_(translator),
      max_batch_(max_batch),
      window_ms_(window_ms),
      worker_([this] { loop(); }) {}

Batcher::~Batcher() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  ready_.notify_all();
  worker_.join();
}

std::future<translate::Translation> Batcher::submit(const std::string& text,
                                                    const decoding::SearchOptions& options,
                                                    const std::string& prefix) {
  Request r{text, options, prefix, {}};
  auto future = r.promise.get_future();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(std::move(r));
  }
  ready_.notify_one();
  return future;
}

std::future<void> Batcher::run(std::function<void()> job) {
  std::packaged_task<void()> task(std::move(job));
  auto future = task.get_future();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    jobs_.push_back(std::move(task));
  }
  ready_.notify_one();
  return future;
}

void Batcher::loop() {
  while (true) {
    std::vector<Request> batch;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      ready_.wait(lock, [&] { return stopping_ || !queue_.empty() || !jobs_.empty(); });
      if (!jobs_.empty()) {
        auto job = std::move(jobs_.front());
        jobs_.pop_front();
        lock.unlock();
        job();  // its exceptions go to its future
        continue;
      }
      if (stopping_ && queue_.empty()) return;
      // Give concurrent requests a moment to arrive, so they share one decoder call.
      ready_.wait_for(lock, std::chrono::duration<double, std::milli>(window_ms_),
                      [&] { return stopping_ || queue_.size() >= max_batch_; });
      const int64_t beam = queue_.front().options.beam_size;
      const bool alone = queue_.front().options.sampling_topk != 1;
      for (auto it = queue_.begin(); it != queue_.end() && batch.size() < max_batch_;) {
        if (batch.empty() ||
            (!alone && it->options.beam_size == beam && it->options.sampling_topk == 1)) {
          batch.push_back(std::move(*it));
          it = queue_.erase(it);
        } else {
          ++it;
        }
      }
    }
    std::vector<std::string> texts, prefixes;
    bool prefixed = false;
    for (const auto& r : batch) {
      texts.push_back(r.text);
      prefixes.push_back(r.prefix);
      prefixed = prefixed || !r.prefix.empty();
    }
    try {
      const decoding::SearchOptions& options = batch.front().options;
      auto results = translator_.translate(texts, options, max_batch_, /*parallel_batches=*/1,
                                           /*stats=*/nullptr,
                                           prefixed ? prefixes : std::vector<std::string>{});
      translator_.add_attention_maps(results);  // the page's layer and head picker
      ++batches_;
      sentences_ += batch.size();
      for (size_t i = 0; i < batch.size(); ++i) batch[i].promise.set_value(std::move(results[i]));
    } catch (...) {
      for (auto& r : batch) r.promise.set_exception(std::current_exception());
    }
  }
}

}  // namespace attnkit::serve
