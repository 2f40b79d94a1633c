// `attnkit quantize`: a model directory whose weights are int8 rows with a scale each, and whose
// decoding computes in int8 (CTranslate2's int8 compute type).

#include <filesystem>
#include <iostream>
#include <memory>

#include "attnkit/core/error.h"
#include "attnkit/io/weights.h"
#include "attnkit/translate/translator.h"
#include "commands.h"
#include "model_dir.h"

namespace attnkit::cli {
namespace fs = std::filesystem;
namespace {

struct QuantizeArgs {
  std::string model, out;
};

int run(const QuantizeArgs& a) {
  translate::Translator translator(a.model);
  if (translator.config().compute_type() == kernels::ComputeType::Int8)
    throw Error("quantize: " + a.model + " is int8 already (config.json's compute_type)");
  NewModelDir dir("quantize", a.model, a.out);
  auto config = translator.config();
  config.set_compute_type(kernels::ComputeType::Int8);
  io::save_quantized_weights(translator.module(), (fs::path(dir.staging()) / "model.pt").string());
  translate::save_config(dir.staging(), config);
  dir.commit();
  const auto weights = (fs::path(a.out) / "model.pt").string();
  const auto source = fs::path(a.model) / "model.pt";
  const double before = fs::exists(source) ? static_cast<double>(fs::file_size(source)) : 0,
               after = static_cast<double>(fs::file_size(weights));
  std::printf("wrote %s: int8 weights, %.2f MB", a.out.c_str(), after / 1e6);
  if (before > 0) std::printf(" (float32 %.2f MB: %.2fx smaller)", before / 1e6, before / after);
  std::printf("\n");
  return 0;
}

}  // namespace

Command add_quantize_command(CLI::App& parent) {
  auto* app = parent.add_subcommand(
      "quantize",
      "Write a model directory whose weights are int8 (a scale per row) and whose translation "
      "computes in int8 (translate, eval, serve and po take it as any model)");
  auto a = std::make_shared<QuantizeArgs>();
  app->add_option("--model", a->model, "Model directory (float32)")->required();
  app->add_option("--out", a->out, "The new model directory")->required();
  return {app, [a] { return run(*a); }};
}

}  // namespace attnkit::cli
