#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
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
  size_t bucket_bytes() const { return options_.bucket_bytes; }

  // Starts summing `flat` in place over the ranks; the returned function waits for it.
  std::function<void()> allreduce_async(at::Tensor flat);
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

// Sums gradients across ranks while the backward pass is still running, as PyTorch's DDP does:
// parameters are grouped into buckets in reverse registration order (roughly the order their
// gradients become final), an autograd hook copies each gradient into its bucket, and a full
// bucket starts its all-reduce at once. Buckets are launched strictly in order, so every rank
// issues the same collectives in the same sequence.
class GradientReducer {
 public:
  GradientReducer(Distributed& distributed, std::vector<at::Tensor> parameters,
                  size_t bucket_bytes);
  ~GradientReducer();
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  // Before a step's first backward (even a rank with nothing to compute must call prepare and
  // finish).
  void prepare();
  // Before each backward of a step that accumulates several (gradient accumulation): the
  // gradients of every pass are summed into the buckets, and only the last pass launches
  // all-reduces as its buckets fill. A step of one backward needs no call.
  void begin_pass(bool last) { last_pass_ = last; }
  // After backward: launches what is left, waits, and writes the summed gradients to .grad.
  void finish();

 private:
  struct Slot {
    size_t bucket;
    int64_t offset;
  };
  void ready(size_t parameter, const at::Tensor& grad);
  void launch_ready_buckets();

  Distributed& distributed_;
  std::vector<at::Tensor> parameters_;
  std::vector<Slot> slots_;
  std::vector<at::Tensor> flats_;
  std::vector<size_t> pending_, sizes_;
  std::vector<std::function<void()>> waits_;
  std::vector<unsigned> hook_ids_;
  size_t next_launch_ = 0;
  bool last_pass_ = true;
};

}  // namespace attnkit::train
