#include "attnkit/train/checkpoint.h"

#include <torch/nn/module.h>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/optim/adam.h>

#include <filesystem>
#include <map>

#include "attnkit/core/error.h"
#include "attnkit/core/files.h"
#include "attnkit/io/pt_file.h"
#include "attnkit/io/state_dict.h"
#include "attnkit/io/weights.h"

namespace attnkit::train {
namespace fs = std::filesystem;

namespace {

// Each parameter's Adam state under "optimizer.<i>.", i its place in the optimizer's list, which
// is the model's parameter order.
constexpr const char* kModel = "model.";

std::string optimizer_key(size_t i, const char* field) {
  return "optimizer." + std::to_string(i) + "." + field;
}

torch::optim::AdamParamState* state_of(torch::optim::Adam& optimizer, const at::Tensor& p) {
  auto it = optimizer.state().find(c10::guts::to_string(p.unsafeGetTensorImpl()));
  return it == optimizer.state().end()
             ? nullptr
             : static_cast<torch::optim::AdamParamState*>(it->second.get());
}

const std::vector<at::Tensor>& params_of(torch::optim::Adam& optimizer) {
  return optimizer.param_groups().at(0).params();
}

// The optimizer's state from a checkpoint's tensors, each checked against its parameter.
void restore_optimizer(torch::optim::Adam& optimizer, const std::map<std::string, at::Tensor>& t,
                       const std::string& path) {
  const auto& params = params_of(optimizer);
  for (size_t i = 0; i < params.size(); ++i) {
    auto avg = t.find(optimizer_key(i, "exp_avg")), sq = t.find(optimizer_key(i, "exp_avg_sq")),
         step = t.find(optimizer_key(i, "step"));
    if (avg == t.end() && sq == t.end() && step == t.end()) continue;  // never stepped
    if (avg == t.end() || sq == t.end() || step == t.end() ||
        avg->second.sizes() != params[i].sizes() || sq->second.sizes() != params[i].sizes() ||
        avg->second.scalar_type() != at::kFloat || sq->second.scalar_type() != at::kFloat ||
        step->second.scalar_type() != at::kLong || step->second.numel() != 1)
      throw Error(path + ": cannot resume (the optimizer's state of parameter " +
                  std::to_string(i) + " is damaged or belongs to another model)");
    auto state = std::make_unique<torch::optim::AdamParamState>();
    state->step(step->second.item<int64_t>());
    state->exp_avg(avg->second.clone());
    state->exp_avg_sq(sq->second.clone());
    optimizer.state()[c10::guts::to_string(params[i].unsafeGetTensorImpl())] = std::move(state);
  }
}

}  // namespace

void save_checkpoint(const std::string& path, Trainable& model, torch::optim::Adam& optimizer,
                     const Position& p) {
  io::TensorDict t;
  for (auto& [name, tensor] : io::state_dict(model.module())) t.emplace_back(kModel + name, tensor);
  const auto& params = params_of(optimizer);
  for (size_t i = 0; i < params.size(); ++i)
    if (auto* s = state_of(optimizer, params[i])) {
      t.emplace_back(optimizer_key(i, "exp_avg"), s->exp_avg());
      t.emplace_back(optimizer_key(i, "exp_avg_sq"), s->exp_avg_sq());
      t.emplace_back(optimizer_key(i, "step"), at::tensor({s->step()}, at::kLong));
    }
  t.emplace_back("rng", at::detail::getDefaultCPUGenerator().get_state());
  t.emplace_back("position", at::tensor({p.epoch, p.batch, p.step, p.bad_epochs, p.bad_lr_epochs,
                                         static_cast<int64_t>(p.baseline.set)}));
  t.emplace_back("metrics",
                 at::tensor({p.best_bleu, p.best_loss, p.lr, p.baseline.value}, at::kDouble));
  io::save_tensor_dict(path, t);  // a full disk keeps the previous checkpoint
}

namespace {

// A checkpoint's tensors by name, read by attnkit's own unpickler, and its model's among them.
std::map<std::string, at::Tensor> read_checkpoint(const std::string& path, io::TensorDict* model) {
  std::map<std::string, at::Tensor> all;
  for (auto& [name, t] : io::load_tensor_dict_bytes(io::read_weights_file(path), path)) {
    if (model && name.rfind(kModel, 0) == 0) model->emplace_back(name.substr(6), t);
    all.emplace(name, t);
  }
  return all;
}

at::Tensor entry(const std::map<std::string, at::Tensor>& t, const std::string& key,
                 const std::string& path) {
  auto it = t.find(key);
  if (it == t.end()) throw Error(path + ": cannot resume (the checkpoint has no '" + key + "')");
  return it->second;
}

}  // namespace

Position load_checkpoint(const std::string& path, Trainable& model, torch::optim::Adam& optimizer,
                         Position p) {
  if (!fs::exists(path)) throw Error(path + ": no checkpoint to resume from");
  io::TensorDict weights;
  const auto t = read_checkpoint(path, &weights);
  const auto expected = io::shapes_of(model.module());
  io::assign(model.module(), weights, path);
  io::check_loaded(model.module(), path, expected);
  restore_optimizer(optimizer, t, path);
  const at::Tensor rng = entry(t, "rng", path), position = entry(t, "position", path),
                   metrics = entry(t, "metrics", path);
  // The archive read, its tensors must still be what save_checkpoint wrote: an accessor does not
  // check bounds.
  if (position.scalar_type() != at::kLong || position.dim() != 1 || position.numel() < 6 ||
      metrics.scalar_type() != at::kDouble || metrics.dim() != 1 || metrics.numel() < 4 ||
      rng.scalar_type() != at::kByte)
    throw Error(path + ": cannot resume (the position, metrics or generator state is damaged)");
  auto generator = at::detail::getDefaultCPUGenerator();
  try {
    generator.set_state(rng);
  } catch (const std::exception& e) {
    throw Error(path + ": cannot resume (the generator state: " + first_line(e.what()) + ")");
  }
  return position_from(position, metrics, p);
}

Position position_from(const at::Tensor& position, const at::Tensor& metrics, Position p) {
  auto pos = position.accessor<int64_t, 1>();
  auto met = metrics.accessor<double, 1>();
  p.epoch = pos[0];
  p.batch = pos[1];
  p.step = pos[2];
  p.bad_epochs = pos[3];
  p.bad_lr_epochs = pos[4];
  p.baseline.set = pos[5] != 0;
  p.best_bleu = met[0];
  p.best_loss = met[1];
  p.lr = met[2];
  p.baseline.value = met[3];
  return p;
}

void load_checkpoint_weights(torch::nn::Module& model, const std::string& path) {
  if (!fs::exists(path)) throw Error(path + ": no such checkpoint");
  io::TensorDict weights;
  read_checkpoint(path, &weights);
  const auto expected = io::shapes_of(model);
  io::assign(model, weights, path);
  io::check_loaded(model, path, expected);
}

}  // namespace attnkit::train
