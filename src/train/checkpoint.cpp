#include "attnkit/train/checkpoint.h"

#include <torch/nn/module.h>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/optim/adam.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <filesystem>
#include <sstream>

#include "attnkit/core/error.h"
#include "attnkit/core/files.h"
#include "attnkit/io/pt_file.h"
#include "attnkit/io/weights.h"

namespace attnkit::train {
namespace fs = std::filesystem;

void save_checkpoint(const std::string& path, Trainable& model, torch::optim::Adam& optimizer,
                     const Position& p) {
  torch::serialize::OutputArchive archive, model_archive, optimizer_archive;
  model.save(model_archive);
  optimizer.save(optimizer_archive);
  archive.write("model", model_archive);
  archive.write("optimizer", optimizer_archive);
  archive.write("rng", at::detail::getDefaultCPUGenerator().get_state());
  archive.write("position", at::tensor({p.epoch, p.batch, p.step, p.bad_epochs, p.bad_lr_epochs,
                                        static_cast<int64_t>(p.baseline.set)}));
  archive.write("metrics",
                at::tensor({p.best_bleu, p.best_loss, p.lr, p.baseline.value}, at::kDouble));
  io::save_archive(archive, path);  // a full disk keeps the previous checkpoint
}

Position load_checkpoint(const std::string& path, Trainable& model, torch::optim::Adam& optimizer,
                         Position p) {
  if (!fs::exists(path)) throw Error(path + ": no checkpoint to resume from");
  torch::serialize::InputArchive archive, model_archive, optimizer_archive;
  at::Tensor rng, position, metrics;
  try {
    std::istringstream bytes(io::read_checked_archive(path));  // CRCs first
    archive.load_from(bytes);
    archive.read("model", model_archive);
    archive.read("optimizer", optimizer_archive);
    model.load(model_archive);
    optimizer.load(optimizer_archive);
    archive.read("rng", rng);
    archive.read("position", position);
    archive.read("metrics", metrics);
  } catch (const std::exception& e) {  // LibTorch's reader throws std::out_of_range too (fuzzing)
    throw Error(path + ": cannot resume (" + first_line(e.what()) + ")");
  }
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
  const auto expected = io::shapes_of(model);
  try {
    torch::serialize::InputArchive archive, weights;
    std::istringstream bytes(io::read_checked_archive(path));  // CRCs first
    archive.load_from(bytes);
    archive.read("model", weights);
    model.load(weights);
  } catch (const std::exception& e) {  // LibTorch's reader throws std::out_of_range too (fuzzing)
    throw Error(path + ": cannot load the checkpoint's weights into the configured model (" +
                first_line(e.what()) + ")");
  }
  io::check_loaded(model, path, expected);
}

}  // namespace attnkit::train
