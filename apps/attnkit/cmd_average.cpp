// `attnkit average`: checkpoint averaging into a model directory of its own.

#include <filesystem>
#include <iostream>
#include <memory>

#include "attnkit/core/error.h"
#include "attnkit/io/weights.h"
#include "attnkit/train/averaging.h"
#include "attnkit/translate/translator.h"
#include "checks.h"
#include "commands.h"
#include "model_dir.h"

namespace attnkit::cli {
namespace fs = std::filesystem;
namespace {

struct AverageArgs {
  std::string model, out;
  size_t last = 5;
  std::vector<std::string> weights;
};

std::vector<std::string> files_to_average(const AverageArgs& a) {
  if (!a.weights.empty()) return a.weights;
  auto kept = train::kept_weights(a.model);
  if (kept.empty())
    throw Error("average: " + (fs::path(a.model) / "checkpoints").string() +
                " holds no kept weights; train with --keep-checkpoints N, or name files with "
                "--weights");
  if (kept.size() > a.last) kept.erase(kept.begin(), kept.end() - static_cast<long>(a.last));
  return kept;
}

int run(const AverageArgs& a) {
  translate::Translator translator(a.model);  // the architecture the files must fit
  const auto files = files_to_average(a);
  train::average_weights(translator.module(), files);
  NewModelDir dir("average", a.model, a.out);
  if (translator.config().compute_type() != kernels::ComputeType::Float32) {
    auto config = translator.config();  // the averaged weights are float32, and so is model.pt
    config.set_compute_type(kernels::ComputeType::Float32);
    translate::save_config(dir.staging(), config);
  }
  io::save_weights(translator.module(), (fs::path(dir.staging()) / "model.pt").string());
  dir.commit();
  const auto out = (fs::path(a.out) / "model.pt").string();
  std::cout << "averaged " << files.size() << " weight files ("
            << fs::path(files.front()).filename().string() << " ... "
            << fs::path(files.back()).filename().string() << ") into " << out << "\n";
  return 0;
}

}  // namespace

Command add_average_command(CLI::App& parent) {
  auto* app = parent.add_subcommand(
      "average",
      "Average the weights of a run's last checkpoints (train --keep-checkpoints) into a new "
      "model directory");
  auto a = std::make_shared<AverageArgs>();
  app->add_option("--model", a->model, "Model directory")->required();
  app->add_option("--out", a->out, "The new model directory")->required();
  app->add_option("--last", a->last, "How many of the newest kept checkpoints")
      ->check(checks::at_least(1))
      ->capture_default_str();
  app->add_option("--weights", a->weights,
                  "Weight files of this model to average instead (model.pt or kept checkpoints)")
      ->excludes("--last")
      ->check(CLI::ExistingFile);
  return {app, [a] { return run(*a); }};
}

}  // namespace attnkit::cli
