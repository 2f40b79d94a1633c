#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <string>
#include <vector>

// Data-parallel training on PyTorch's own engine: c10d ProcessGroupGloo over TCP, rendezvous
// through a TCPStore. Launch as torchrun does (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT,
// LOCAL_RANK), or let `attnkit train --nproc N` spawn N workers on this machine.
namespace attnkit::train {

struct DistributedOptions {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  double timeout_s = 120;  // a collective waiting longer than this fails (a dead or hung peer)
  size_t bucket_bytes = 4 << 20;
};

// Reads the torchrun variables; world_size is 1 when WORLD_SIZE is unset. A malformed variable
// is an attnkit::Error naming it.
DistributedOptions distributed_from_env();

class Distributed {
 public:
  // Connects to the other ranks (rank 0 hosts the TCPStore). Throws attnkit::Error when the
  // group cannot form within the timeout.
  explicit Distributed(const DistributedOptions& options);
  ~Distributed();
  Distributed(const Distributed&) = delete;
  Distributed& operator=(const Distributed&) = delete;

  int rank() const { return options_.rank; }
  int world_size() const { return options_.world_size; }
  bool is_main() const { return options_.rank == 0; }

  // Sums every parameter's gradient over the ranks, in buckets of about bucket_bytes: each
  // bucket's all-reduce starts as soon as it is packed, and they complete together.
  void allreduce_gradients(const std::vector<at::Tensor>& parameters);
  // Sums doubles over the ranks (token counts, stop flags).
  std::vector<double> allreduce_sum(std::vector<double> values);
  // Rank 0's values, on every rank.
  std::vector<double> broadcast(std::vector<double> values);
  void barrier();

 private:
  struct Impl;
  DistributedOptions options_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace attnkit::train
