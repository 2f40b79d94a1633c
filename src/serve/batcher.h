#pragma once

// Private to src/serve: collects concurrent translation requests into batches.

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <string>
#include <thread>

#include "attnkit/translate/translator.h"

namespace attnkit::serve {

class Batcher {
 public:
  Batcher(translate::Translator& translator, size_t max_batch, double window_ms);
  ~Batcher();
  // Queued; the future is ready when the batch holding it has been translated: requests of
  // the same beam share a batch; a sampling one is a batch of its own, so that its draws
  // depend on its seed alone. `prefix`: the start the translation must have ("" for none).
  std::future<translate::Translation> submit(const std::string& text,
                                             const decoding::SearchOptions& options,
                                             const std::string& prefix = "");
  // Runs `job` on the batcher's thread between two batches, with the translator to itself (a
  // catalog for POST /api/po); the future is ready when it has run.
  std::future<void> run(std::function<void()> job);
  // Decoder calls made and sentences translated so far: batching shows as calls < sentences.
  size_t batches_run() const { return batches_; }
  size_t sentences_run() const { return sentences_; }
  // For jobs given to run(), which have the translator to themselves.
  translate::Translator& translator() { return translator_; }

 private:
  struct Request {
    std::string text;
    decoding::SearchOptions options;
    std::string prefix;
    std::promise<translate::Translation> promise;
  };
  void loop();

  translate::Translator& translator_;
  size_t max_batch_;
  double window_ms_;
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<Request> queue_;
  std::deque<std::packaged_task<void()>> jobs_;
  bool stopping_ = false;
  std::atomic<size_t> batches_{0}, sentences_{0};
  std::thread worker_;
};

}  // namespace attnkit::serve
