// `attnkit upgrade`: a model directory whose weights attnkit 0.2 wrote as LibTorch (TorchScript)
// archives, rewritten in place as the torch.save dicts attnkit reads. The one place that still
// reads such archives: their importer runs the code records they carry, so this is for
// directories the user trusts, and says so.

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/nn/module.h>
#include <torch/optim/adam.h>
#include <torch/serialize/input-archive.h>

#include <filesystem>
#include <iostream>
#include <memory>
#include <sstream>

#include "attnkit/core/error.h"
#include "attnkit/core/files.h"
#include "attnkit/io/pt_file.h"
#include "attnkit/io/weights.h"
#include "attnkit/train/checkpoint.h"
#include "attnkit/translate/model_dir.h"
#include "attnkit/translate/registry.h"
#include "commands.h"

namespace attnkit::cli {
namespace fs = std::filesystem;
namespace {

bool is_torchscript(const std::string& path) {
  try {
    io::read_weights_file(path);
    return false;
  } catch (const Error& e) {
    return std::string(e.what()).find("a LibTorch archive") != std::string::npos;
  }
}

torch::serialize::InputArchive open_archive(const std::string& path) {
  torch::serialize::InputArchive archive;
  std::istringstream bytes(io::read_checked_archive(path));  // sizes and CRCs first
  archive.load_from(bytes);
  return archive;
}

// model.pt (and each kept checkpoints/step-*.pt): the module's weights, read by LibTorch.
void upgrade_weights(torch::nn::Module& module, const std::string& path) {
  auto archive = open_archive(path);
  const auto expected = io::shapes_of(module);
  module.load(archive);
  io::check_loaded(module, path, expected);
  io::save_weights(module, path);
}

// checkpoint.pt: weights, Adam's state, the generator and the position, as save_checkpoint
// writes them now.
void upgrade_checkpoint(decoding::TranslationModel& model, const translate::ModelConfig& config,
                        const std::string& path) {
  auto trainable = translate::make_trainable(model, config);
  torch::optim::Adam optimizer(trainable->parameters(), torch::optim::AdamOptions(1e-3));
  auto archive = open_archive(path);
  torch::serialize::InputArchive weights, state;
  archive.read("model", weights);
  archive.read("optimizer", state);
  const auto expected = io::shapes_of(model.module());
  model.module().load(weights);
  io::check_loaded(model.module(), path, expected);
  optimizer.load(state);
  at::Tensor rng, position, metrics;
  archive.read("rng", rng);
  archive.read("position", position);
  archive.read("metrics", metrics);
  if (position.scalar_type() != at::kLong || position.dim() != 1 || position.numel() < 6 ||
      metrics.scalar_type() != at::kDouble || metrics.dim() != 1 || metrics.numel() < 4)
    throw Error(path + ": the position or metrics are damaged");
  train::Position p = train::position_from(position, metrics);
  // save_checkpoint writes the process's generator: give it the checkpoint's.
  auto generator = at::detail::getDefaultCPUGenerator();
  const auto saved = generator.get_state();
  generator.set_state(rng);
  train::save_checkpoint(path, *trainable, optimizer, p);
  generator.set_state(saved);
}

int run(const std::string& dir) {
  const auto config = translate::load_config(dir);
  if (config.compute_type() == kernels::ComputeType::Int8)
    throw Error(dir + ": an int8 directory, whose model.pt attnkit reads already");
  std::vector<std::string> weights;
  for (const auto& name : {"model.pt"})
    if (fs::exists(fs::path(dir) / name)) weights.push_back((fs::path(dir) / name).string());
  if (fs::is_directory(fs::path(dir) / "checkpoints"))
    for (const auto& f : fs::directory_iterator(fs::path(dir) / "checkpoints"))
      if (f.path().extension() == ".pt") weights.push_back(f.path().string());
  const auto checkpoint = (fs::path(dir) / "checkpoint.pt").string();
  size_t done = 0;
  for (const auto& path : weights) {
    if (!is_torchscript(path)) continue;
    auto model = translate::build_model(config);
    upgrade_weights(model->module(), path);
    std::cout << "upgraded " << path << "\n";
    ++done;
  }
  if (fs::exists(checkpoint) && is_torchscript(checkpoint)) {
    auto model = translate::build_model(config);
    upgrade_checkpoint(*model, config, checkpoint);
    std::cout << "upgraded " << checkpoint << "\n";
    ++done;
  }
  std::cout << (done ? "" : "nothing to upgrade: ") << dir
            << (done ? " now holds torch.save dicts only\n" : " holds torch.save dicts only\n");
  return 0;
}

}  // namespace

Command add_upgrade_command(CLI::App& parent) {
  auto* app = parent.add_subcommand(
      "upgrade",
      "Rewrite a model directory's LibTorch archives (model.pt, checkpoint.pt as attnkit 0.2 "
      "wrote them) as the torch.save dicts attnkit reads. Reading such an archive runs the code "
      "it carries: upgrade only directories you trust");
  auto dir = std::make_shared<std::string>();
  app->add_option("dir", *dir, "Model directory")->required();
  return {app, [dir] { return run(*dir); }};
}

}  // namespace attnkit::cli
