#include "attnkit/train/distributed.h"

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <torch/csrc/autograd/grad_mode.h>

#include <chrono>
#include <cstdlib>

#include "attnkit/core/error.h"
#include "attnkit/core/files.h"

namespace attnkit::train {
namespace {

int env_int(const char* name, int fallback) {
  const char* value = std::getenv(name);
  if (!value || !*value) return fallback;
  try {
    size_t used = 0;
    const int v = std::stoi(value, &used);
    if (used != std::string(value).size()) throw std::invalid_argument(name);
    return v;
  } catch (const std::exception&) {
    throw Error(std::string("environment variable ") + name + "='" + value + "' is not an integer");
  }
}

}  // namespace

struct Distributed::Impl {
  c10::intrusive_ptr<c10d::TCPStore> store;
  c10::intrusive_ptr<c10d::ProcessGroupGloo> group;

  // Runs a collective and turns a failure into an error a user can act on.
  template <typename F>
  void run(const DistributedOptions& o, const char* what, F&& f) {
    try {
      f();
    } catch (const std::exception& e) {
      std::string message = e.what();
      if (auto* c10 = dynamic_cast<const c10::Error*>(&e)) message = c10->what_without_backtrace();
      throw Error("rank " + std::to_string(o.rank) + ": " + what + " with the other " +
                  std::to_string(o.world_size - 1) +
                  " rank(s) failed (a worker died, hung for more than " +
                  std::to_string(static_cast<int>(o.timeout_s)) +
                  " s, or the network broke): " + first_line(message));
    }
  }
};

DistributedOptions distributed_from_env() {
  DistributedOptions o;
  o.world_size = env_int("WORLD_SIZE", 1);
  o.rank = env_int("RANK", 0);
  o.local_rank = env_int("LOCAL_RANK", o.rank);
  o.master_port = env_int("MASTER_PORT", 29500);
  if (const char* addr = std::getenv("MASTER_ADDR")) o.master_addr = addr;
  if (o.world_size < 1) throw Error("WORLD_SIZE must be >= 1");
  if (o.rank < 0 || o.rank >= o.world_size)
    throw Error("RANK=" + std::to_string(o.rank) + " is outside 0.." +
                std::to_string(o.world_size - 1));
  if (o.master_port <= 0 || o.master_port > 65535) throw Error("MASTER_PORT must be a TCP port");
  return o;
}

Distributed::Distributed(const DistributedOptions& o)
    : options_(o), impl_(std::make_unique<Impl>()) {
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(o.timeout_s * 1000));
  impl_->run(o, "forming the process group", [&] {
    c10d::TCPStoreOptions store_options;
    store_options.port = static_cast<uint16_t>(o.master_port);
    store_options.isServer = o.rank == 0;
    store_options.numWorkers = o.world_size;
    store_options.timeout = timeout;
    impl_->store = c10::make_intrusive<c10d::TCPStore>(o.master_addr, store_options);
    auto options = c10d::ProcessGroupGloo::Options::create(timeout);
    // The ranks must reach each other: loopback when the master is local, else the interface
    // named by GLOO_SOCKET_IFNAME (as in PyTorch), else the address this host's name resolves to.
    const char* ifname = std::getenv("GLOO_SOCKET_IFNAME");
    if (ifname && *ifname)
      options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(ifname));
    else if (o.master_addr == "127.0.0.1" || o.master_addr == "localhost")
      options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
    else
      options->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
    options->threads = 1;
    impl_->group =
        c10::make_intrusive<c10d::ProcessGroupGloo>(impl_->store, o.rank, o.world_size, options);
  });
}

Distributed::~Distributed() = default;

std::function<void()> Distributed::allreduce_async(at::Tensor flat) {
  std::vector<at::Tensor> tensors = {flat};
  c10::intrusive_ptr<c10d::Work> work;
  impl_->run(options_, "all-reducing gradients", [&] { work = impl_->group->allreduce(tensors); });
  return [this, work] { impl_->run(options_, "all-reducing gradients", [&] { work->wait(); }); };
}

GradientReducer::GradientReducer(Distributed& distributed, std::vector<at::Tensor> parameters,
                                 size_t bucket_bytes)
    : distributed_(distributed), parameters_(std::move(parameters)) {
  slots_.resize(parameters_.size());
  int64_t offset = 0;
  size_t bytes = 0;
  // Reverse order: the last layers' gradients are final first.
  for (size_t k = parameters_.size(); k-- > 0;) {
    const auto& p = parameters_[k];
    if (sizes_.empty() || bytes >= bucket_bytes) {
      sizes_.push_back(0);
      offset = 0;
      bytes = 0;
    }
    slots_[k] = {sizes_.size() - 1, offset};
    offset += p.numel();
    sizes_.back() += static_cast<size_t>(p.numel());
    bytes += p.numel() * p.element_size();
  }
  for (size_t b = 0; b < sizes_.size(); ++b)
    flats_.push_back(at::zeros({static_cast<int64_t>(sizes_[b])}, parameters_.front().options()));
  for (size_t k = 0; k < parameters_.size(); ++k)
    hook_ids_.push_back(
        parameters_[k].register_hook([this, k](const at::Tensor& grad) { ready(k, grad); }));
}

GradientReducer::~GradientReducer() {
  for (size_t k = 0; k < hook_ids_.size(); ++k) parameters_[k].remove_hook(hook_ids_[k]);
}

void GradientReducer::prepare() {
  pending_.assign(flats_.size(), 0);
  for (const auto& s : slots_) ++pending_[s.bucket];
  for (auto& f : flats_) f.zero_();
  waits_.clear();
  next_launch_ = 0;
  last_pass_ = true;
}

void GradientReducer::ready(size_t k, const at::Tensor& grad) {
  const auto& s = slots_[k];
  flats_[s.bucket].narrow(0, s.offset, grad.numel()).add_(grad.reshape({-1}));
  if (last_pass_ && --pending_[s.bucket] == 0) launch_ready_buckets();
}

void GradientReducer::launch_ready_buckets() {
  while (next_launch_ < flats_.size() && pending_[next_launch_] == 0)
    waits_.push_back(distributed_.allreduce_async(flats_[next_launch_++]));
}

void GradientReducer::finish() {
  // Parameters that got no gradient this step contribute zeros.
  for (auto& p : pending_) p = 0;
  launch_ready_buckets();
  for (auto& wait : waits_) wait();
  torch::NoGradGuard no_grad;
  for (size_t k = 0; k < parameters_.size(); ++k) {
    auto& p = parameters_[k];
    const auto& s = slots_[k];
    auto summed = flats_[s.bucket].narrow(0, s.offset, p.numel()).view_as(p);
    if (!p.grad().defined())
      p.mutable_grad() = summed.clone();
    else
      p.mutable_grad().copy_(summed);
  }
}

std::vector<double> Distributed::allreduce_sum(std::vector<double> values) {
  std::vector<at::Tensor> t = {at::tensor(values, at::kDouble)};
  impl_->run(options_, "an all-reduce", [&] { impl_->group->allreduce(t)->wait(); });
  for (size_t i = 0; i < values.size(); ++i) values[i] = t[0][i].item<double>();
  return values;
}

std::vector<double> Distributed::broadcast(std::vector<double> values) {
  std::vector<at::Tensor> t = {at::tensor(values, at::kDouble)};
  impl_->run(options_, "a broadcast from rank 0", [&] { impl_->group->broadcast(t)->wait(); });
  for (size_t i = 0; i < values.size(); ++i) values[i] = t[0][i].item<double>();
  return values;
}

void Distributed::barrier() {
  impl_->run(options_, "a barrier", [&] { impl_->group->barrier()->wait(); });
}

}  // namespace attnkit::train
