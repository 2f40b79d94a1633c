#pragma once

// How the kernels share the cores with a caller that runs threads of its own. The kernels split
// a product's rows between threads (src/kernels/row_parts.h); a caller that already gives each
// core a batch of its own (the translator's batch workers) wants each kernel on its thread.
namespace attnkit::kernels {

// While one lives, the kernels called on its thread keep their work on that thread.
class OnePartPerThread {
 public:
  OnePartPerThread() { ++depth(); }
  ~OnePartPerThread() { --depth(); }
  OnePartPerThread(const OnePartPerThread&) = delete;
  OnePartPerThread& operator=(const OnePartPerThread&) = delete;
  static bool active() { return depth() > 0; }
  static int nesting() { return depth(); }  // how many live on this thread

 private:
  static int& depth() {
    thread_local int d = 0;
    return d;
  }
};

}  // namespace attnkit::kernels
