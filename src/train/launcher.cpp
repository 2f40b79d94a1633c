#include "attnkit/train/launcher.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>

#include "attnkit/core/error.h"

extern char** environ;

namespace attnkit::train {
namespace {

// A socket closed on every path out of the scope.
struct Socket {
  int fd;
  ~Socket() {
    if (fd >= 0) close(fd);
  }
};

bool is_rendezvous_variable(const std::string& name) {
  return name == "RANK" || name == "WORLD_SIZE" || name == "LOCAL_RANK" || name == "MASTER_ADDR" ||
         name == "MASTER_PORT";
}

// The worker's environment: ours, with the rendezvous variables set for `rank`.
std::vector<std::string> worker_environment(int rank, int nproc, int port) {
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    const std::string kv = *e;
    if (!is_rendezvous_variable(kv.substr(0, kv.find('=')))) env.push_back(kv);
  }
  for (const auto& kv :
       {"RANK=" + std::to_string(rank), "LOCAL_RANK=" + std::to_string(rank),
        "WORLD_SIZE=" + std::to_string(nproc), std::string("MASTER_ADDR=127.0.0.1"),
        "MASTER_PORT=" + std::to_string(port), std::string("ATTNKIT_MODEL_DIR_LOCKED=1")})
    env.push_back(kv);
  return env;
}

// The worker's arguments: the command line less --nproc and --threads, with --threads given.
std::vector<std::string> worker_arguments(int threads,
                                          const std::vector<std::string>& command_line) {
  std::vector<std::string> args = {"/proc/self/exe", "--threads", std::to_string(threads)};
  for (size_t i = 1; i < command_line.size(); ++i) {
    const auto& arg = command_line[i];
    if (arg == "--nproc" || arg == "--threads") {
      ++i;  // and its value
      continue;
    }
    if (arg.rfind("--nproc=", 0) == 0 || arg.rfind("--threads=", 0) == 0) continue;
    args.push_back(arg);
  }
  return args;
}

pid_t spawn(std::vector<std::string> args, std::vector<std::string> env) {
  std::vector<char*> argv, envp;
  for (auto& x : args) argv.push_back(x.data());
  argv.push_back(nullptr);
  for (auto& x : env) envp.push_back(x.data());
  envp.push_back(nullptr);
  pid_t pid;
  if (posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv.data(), envp.data()) != 0)
    return -1;
  return pid;
}

}  // namespace

int free_loopback_port() {
  Socket s{socket(AF_INET, SOCK_STREAM, 0)};
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (s.fd < 0 || bind(s.fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      getsockname(s.fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0)
    throw Error("train --nproc: cannot find a free port on 127.0.0.1");
  return ntohs(addr.sin_port);
}

LaunchResult launch_local_workers(int nproc, int threads,
                                  const std::vector<std::string>& command_line) {
  const int port = free_loopback_port();
  const auto args = worker_arguments(threads, command_line);
  std::vector<pid_t> pids;
  for (int r = 0; r < nproc; ++r) {
    const pid_t pid = spawn(args, worker_environment(r, nproc, port));
    if (pid < 0) {
      for (pid_t p : pids) kill(p, SIGTERM);
      for (pid_t p : pids) waitpid(p, nullptr, 0);
      throw Error("train --nproc: cannot start worker " + std::to_string(r));
    }
    pids.push_back(pid);
  }
  LaunchResult result;
  for (size_t done = 0; done < pids.size(); ++done) {
    int status = 0;
    const pid_t pid = waitpid(-1, &status, 0);
    const int rank = static_cast<int>(std::find(pids.begin(), pids.end(), pid) - pids.begin());
    const int exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (exit_code != 0 && result.failed_rank < 0) {
      result = {rank, exit_code};
      for (size_t i = 0; i < pids.size(); ++i)
        if (static_cast<int>(i) != rank) kill(pids[i], SIGTERM);
    }
  }
  return result;
}

}  // namespace attnkit::train
