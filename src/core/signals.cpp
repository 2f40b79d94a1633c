#include "attnkit/core/signals.h"

namespace attnkit {

SignalGuard::SignalGuard(std::initializer_list<int> signals, void (*handler)(int)) {
  struct sigaction action {};
  action.sa_handler = handler;
  action.sa_flags = SA_RESTART;  // as signal() installs it: interrupted reads resume
  sigemptyset(&action.sa_mask);
  for (int s : signals) {
    struct sigaction old {};
    if (sigaction(s, &action, &old) == 0) previous_.emplace_back(s, old);
  }
}

SignalGuard::~SignalGuard() {
  for (auto it = previous_.rbegin(); it != previous_.rend(); ++it)
    sigaction(it->first, &it->second, nullptr);
}

}  // namespace attnkit
