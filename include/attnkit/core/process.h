#pragma once

#include <sys/types.h>

#include <functional>
#include <string>
#include <string_view>
#include <vector>

// Other programs run as attnkit's helpers (apt-get, dpkg-deb, tar): started without a shell, so
// that no argument is ever parsed as shell syntax, with their output captured.
namespace attnkit {

struct ProcessOptions {
  std::string cwd;     // empty: this process's working directory
  int stdin_fd = -1;   // -1: /dev/null
  int stdout_fd = -1;  // -1: captured into ProcessResult::out
  // With stdout captured: each line (without its '\n') is given here as it comes instead of
  // being kept, for output larger than memory should hold (a Contents index: a gigabyte).
  std::function<void(std::string_view line)> on_line;
};

struct ProcessResult {
  int exit_code = 0;  // the program's status, or 128 + the signal that ended it
  std::string out, err;
  bool ok() const { return exit_code == 0; }
};

// A started program; wait() reaps it (the destructor kills and reaps one never waited for).
class Child {
 public:
  Child(const std::vector<std::string>& argv, const ProcessOptions& options);
  ~Child();
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  // Reads the captured streams to their ends, then waits for the program to exit.
  ProcessResult wait();

 private:
  void hand_out_lines(std::string& out, bool all);
  pid_t pid_ = -1;
  std::function<void(std::string_view)> on_line_;
  int out_ = -1, err_ = -1;  // our ends of the capture pipes
};

// Runs argv[0] (looked up on PATH) to its end. Throws attnkit::Error when it cannot be started
// (no such program); a program that fails is an exit code, for the caller to explain.
ProcessResult run_process(const std::vector<std::string>& argv, const ProcessOptions& options = {});

// `first | second`: first's stdout into second's stdin; second's output captured. The result is
// second's, or first's when first failed (a broken input explains a failed reader).
ProcessResult run_pipeline(const std::vector<std::string>& first,
                           const std::vector<std::string>& second,
                           const ProcessOptions& second_options = {});

// Whether `program` is an executable on PATH.
bool on_path(const std::string& program);

}  // namespace attnkit
