#pragma once

#include <string>
#include <vector>

// `attnkit train --nproc N`: N copies of the running command as ranks 0..N-1 on 127.0.0.1, with
// the variables torchrun sets (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT).
namespace attnkit::train {

struct LaunchResult {
  int failed_rank = -1;  // the first worker that failed, or -1
  int exit_code = 0;     // its exit code (128 + the signal when killed)
};

// A port the kernel says is free on 127.0.0.1 now (the master binds it a moment later).
// attnkit::Error when there is none.
int free_loopback_port();

// Starts `nproc` workers running this executable with `command_line` (argv, its first element
// ignored) less any --nproc and --threads, plus `--threads threads`, and waits for them. If one
// fails, the others are sent SIGTERM. attnkit::Error if a worker cannot start.
LaunchResult launch_local_workers(int nproc, int threads,
                                  const std::vector<std::string>& command_line);

}  // namespace attnkit::train
