#include "attnkit/core/process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "attnkit/core/error.h"

extern char** environ;

namespace attnkit {
namespace {

void make_pipe(int fds[2]) {
  if (pipe2(fds, O_CLOEXEC) != 0) throw Error(std::string("pipe failed: ") + std::strerror(errno));
}

}  // namespace

Child::Child(const std::vector<std::string>& argv, const ProcessOptions& options) {
  if (argv.empty()) throw Error("run_process: no program");
  int out[2] = {-1, -1}, err[2];
  if (options.stdout_fd < 0) make_pipe(out);
  make_pipe(err);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (options.stdin_fd >= 0)
    posix_spawn_file_actions_adddup2(&actions, options.stdin_fd, STDIN_FILENO);
  else
    posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, options.stdout_fd >= 0 ? options.stdout_fd : out[1],
                                   STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, err[1], STDERR_FILENO);
  if (!options.cwd.empty()) posix_spawn_file_actions_addchdir_np(&actions, options.cwd.c_str());
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const int rc = posix_spawnp(&pid_, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (out[1] >= 0) close(out[1]);
  close(err[1]);
  out_ = out[0];
  err_ = err[0];
  on_line_ = options.on_line;
  if (rc != 0) {
    pid_ = -1;
    if (out_ >= 0) close(out_);
    close(err_);
    throw Error("cannot run " + argv[0] + ": " + std::strerror(rc));
  }
}

Child::~Child() {
  if (out_ >= 0) close(out_);
  if (err_ >= 0) close(err_);
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
}

void Child::hand_out_lines(std::string& out, bool all) {
  size_t start = 0;
  for (size_t nl; (nl = out.find('\n', start)) != std::string::npos; start = nl + 1)
    on_line_(std::string_view(out).substr(start, nl - start));
  if (all && start < out.size()) {
    on_line_(std::string_view(out).substr(start));
    start = out.size();
  }
  out.erase(0, start);
}

ProcessResult Child::wait() {
  ProcessResult r;
  // Both streams at once: a program that fills one pipe while we block on the other would hang.
  std::vector<pollfd> fds;
  if (out_ >= 0) fds.push_back({out_, POLLIN, 0});
  if (err_ >= 0) fds.push_back({err_, POLLIN, 0});
  char buffer[1 << 16];
  while (!fds.empty()) {
    if (poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (size_t i = 0; i < fds.size();) {
      if (!fds[i].revents) {
        ++i;
        continue;
      }
      const ssize_t n = read(fds[i].fd, buffer, sizeof buffer);
      if (n < 0 && errno == EINTR) continue;
      if (n > 0) {
        (fds[i].fd == out_ ? r.out : r.err).append(buffer, static_cast<size_t>(n));
        if (fds[i].fd == out_ && on_line_) hand_out_lines(r.out, /*all=*/false);
        ++i;
        continue;
      }
      close(fds[i].fd);
      (fds[i].fd == out_ ? out_ : err_) = -1;
      fds.erase(fds.begin() + static_cast<long>(i));
    }
  }
  if (on_line_) hand_out_lines(r.out, /*all=*/true);
  int status = 0;
  while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  pid_ = -1;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

ProcessResult run_process(const std::vector<std::string>& argv, const ProcessOptions& options) {
  return Child(argv, options).wait();
}

ProcessResult run_pipeline(const std::vector<std::string>& first,
                           const std::vector<std::string>& second,
                           const ProcessOptions& second_options) {
  int fds[2];
  make_pipe(fds);
  ProcessOptions first_options;
  first_options.stdout_fd = fds[1];
  ProcessOptions reader = second_options;
  reader.stdin_fd = fds[0];
  std::unique_ptr<Child> writer;
  try {
    writer = std::make_unique<Child>(first, first_options);
  } catch (...) {
    close(fds[0]);
    close(fds[1]);
    throw;
  }
  close(fds[1]);
  ProcessResult result;
  try {
    Child child(second, reader);
    close(fds[0]);
    fds[0] = -1;
    result = child.wait();
  } catch (...) {
    if (fds[0] >= 0) close(fds[0]);
    throw;
  }
  ProcessResult head = writer->wait();
  // The reader stopped early (it had what it wanted): the writer's SIGPIPE is no failure.
  if (!head.ok() && head.exit_code != 128 + SIGPIPE) return head;
  return result;
}

bool on_path(const std::string& program) {
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/bin:/bin";
  size_t start = 0;
  while (start <= dirs.size()) {
    const size_t end = std::min(dirs.find(':', start), dirs.size());
    const std::string candidate = dirs.substr(start, end - start) + "/" + program;
    if (access(candidate.c_str(), X_OK) == 0) return true;
    start = end + 1;
  }
  return false;
}

}  // namespace attnkit
