#include "attnkit/train/distributed.h"

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <chrono>
#include <cstdlib>

#include "attnkit/core/error.h"

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
                  " s, or the network broke): " + message.substr(0, message.find('\n')));
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

void Distributed::allreduce_gradients(const std::vector<at::Tensor>& parameters) {
  std::vector<std::vector<at::Tensor>> buckets(1);
  size_t bytes = 0;
  for (const auto& p : parameters) {
    if (!p.grad().defined()) p.mutable_grad() = at::zeros_like(p);
    if (bytes >= options_.bucket_bytes) {
      buckets.emplace_back();
      bytes = 0;
    }
    buckets.back().push_back(p.grad());
    bytes += p.numel() * p.element_size();
  }
  // Pack each bucket into one flat tensor and start its all-reduce before packing the next.
  std::vector<at::Tensor> flats;
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  impl_->run(options_, "all-reducing gradients", [&] {
    for (const auto& bucket : buckets) {
      if (bucket.empty()) continue;
      std::vector<at::Tensor> views;
      for (const auto& g : bucket) views.push_back(g.reshape({-1}));
      std::vector<at::Tensor> flat = {at::cat(views)};
      works.push_back(impl_->group->allreduce(flat));
      flats.push_back(flat[0]);
    }
    for (auto& w : works) w->wait();
  });
  for (size_t b = 0, f = 0; b < buckets.size(); ++b) {
    if (buckets[b].empty()) continue;
    int64_t offset = 0;
    for (auto& g : buckets[b]) {
      g.copy_(flats[f].narrow(0, offset, g.numel()).view_as(g));
      offset += g.numel();
    }
    ++f;
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
