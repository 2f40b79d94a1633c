// `attnkit average`: checkpoint averaging into a model directory of its own.

#include <filesystem>
#include <iostream>
#include <memory>

#include "attnkit/core/error.h"
#include "attnkit/seq2seq/translator.h"
#include "attnkit/train/averaging.h"
#include "checks.h"
#include "commands.h"

namespace attnkit::cli {
namespace fs = std::filesystem;
namespace {

struct AverageArgs {
  std::string model, out;
  size_t last = 5;
  std::vector<std::string> weights;
};

// The files that describe the model besides its weights: config.json, the vocabularies and any
// SentencePiece models.
bool describes_model(const fs::path& file) {
  const auto name = file.filename().string();
  return name == "config.json" || file.extension() == ".vocab" ||
         name.find(".spm.") != std::string::npos;
}

// A new directory, or one without a model: averaging never replaces another model's weights.
void prepare_output(const AverageArgs& a) {
  if (fs::exists(a.out) && fs::equivalent(a.out, a.model))
    throw Error("average: --out must be a new directory, not the model directory " + a.model);
  for (const char* file : {"config.json", "model.pt"})
    if (fs::exists(fs::path(a.out) / file))
      throw Error("average: " + a.out + " already holds a model (" +
                  (fs::path(a.out) / file).string() + "); name a new directory");
  fs::create_directories(a.out);
}

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
  seq2seq::Translator translator(a.model);  // the architecture the files must fit
  const auto files = files_to_average(a);
  train::average_weights(translator.module(), files);
  prepare_output(a);
  for (const auto& entry : fs::directory_iterator(a.model))
    if (entry.is_regular_file() && describes_model(entry.path()))
      fs::copy_file(entry.path(), fs::path(a.out) / entry.path().filename(),
                    fs::copy_options::overwrite_existing);
  const auto out = (fs::path(a.out) / "model.pt").string();
  seq2seq::save_weights(translator.module(), out);
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
