#pragma once

#include <signal.h>

#include <initializer_list>
#include <vector>

namespace attnkit {

// Installs `handler` for `signals` for the guard's lifetime and restores the previous handlers
// when it ends, on every exit path (a return, an exception), so that a library call that
// catches Ctrl-C (training, the server) leaves the caller's handlers as it found them.
class SignalGuard {
 public:
  SignalGuard(std::initializer_list<int> signals, void (*handler)(int));
  ~SignalGuard();
  SignalGuard(const SignalGuard&) = delete;
  SignalGuard& operator=(const SignalGuard&) = delete;

 private:
  std::vector<std::pair<int, struct sigaction>> previous_;
};

}  // namespace attnkit
