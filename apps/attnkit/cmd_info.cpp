#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <optional>

#include "attnkit/core/blas_core.h"
#include "attnkit/core/info.h"
#include "attnkit/kernels/cpu/cpu_isa.h"
#include "attnkit/translate/translator.h"
#include "commands.h"

namespace attnkit::cli {
namespace {

// Whether ATTNKIT_ISA chose the kernels' ISA (kernels/cpu_isa.h).
bool isa_forced() {
  const char* forced = std::getenv("ATTNKIT_ISA");
  return forced && *forced;
}

// OpenBLAS reads OPENBLAS_CORETYPE once, when it loads: the rate of another core is measured in
// a child process of this same program.
std::optional<double> sgemm_gflops_on_core(const std::string& core) {
  std::error_code ec;
  const std::string self = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  if (ec) return std::nullopt;
  std::string quoted = "'";
  for (char c : self) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  quoted += "'";
  const std::string command = "OPENBLAS_CORETYPE=" + core + " OPENBLAS_NUM_THREADS=1 " + quoted +
                              " info --sgemm-gflops 2>/dev/null";
  FILE* child = popen(command.c_str(), "r");
  if (!child) return std::nullopt;
  double gflops = 0;
  const bool read = std::fscanf(child, "%lf", &gflops) == 1;
  if (pclose(child) != 0 || !read || gflops <= 0) return std::nullopt;
  return gflops;
}

// When OpenBLAS runs kernels below what this CPU runs: its core, the better one, and both SGEMM
// rates, measured (about a second). Empty when its core is the best one or not known.
struct BlasCoreCheck {
  std::string live, best;
  double live_gflops = 0, best_gflops = 0;
};

std::optional<BlasCoreCheck> check_blas_core(const RuntimeInfo& info) {
  BlasCoreCheck check;
  check.live = live_openblas_core();
  check.best = best_openblas_core(info.cpu_features);
  const int live_level = openblas_core_level(check.live);
  if (check.live.empty() || live_level < 0 || live_level >= openblas_core_level(check.best))
    return std::nullopt;
  check.live_gflops = measure_sgemm_gflops();
  check.best_gflops = sgemm_gflops_on_core(check.best).value_or(0);
  return check;
}

// What info --model says of a model directory.
struct ModelSummary {
  std::string dir, arch, compute_type;
  int64_t parameters = 0;
  uintmax_t weights_bytes = 0;  // model.pt
};

ModelSummary summarize_model(const std::string& dir) {
  translate::Translator translator(dir);  // loads it: a damaged directory is an error here
  ModelSummary m;
  m.dir = dir;
  m.arch = translate::to_string(translator.config().arch);
  m.compute_type = kernels::to_string(translator.config().compute_type());
  for (const auto& p : translator.module().parameters()) m.parameters += p.numel();
  std::error_code ec;
  m.weights_bytes = std::filesystem::file_size(std::filesystem::path(dir) / "model.pt", ec);
  if (ec) m.weights_bytes = 0;
  return m;
}

void print_json(const RuntimeInfo& info, const std::optional<BlasCoreCheck>& core,
                const std::optional<ModelSummary>& model) {
  nlohmann::json j = {{"attnkit", info.attnkit_version},
                      {"libtorch", info.torch_version},
                      {"blas",
                       {{"name", info.blas.name},
                        {"library", info.blas.library},
                        {"detail", info.blas.detail},
                        {"reference", info.blas.is_reference},
                        {"core", live_openblas_core()},
                        {"best_core", best_openblas_core(info.cpu_features)}}},
                      {"threads",
                       {{"intra_op", info.intra_op_threads},
                        {"inter_op", info.inter_op_threads},
                        {"hardware", info.hardware_threads}}},
                      {"cpu",
                       {{"model", info.cpu_model},
                        {"torch_capability", info.torch_cpu_capability},
                        {"kernel_isa", kernels::to_string(kernels::cpu_isa())},
                        {"detected_isa", kernels::to_string(kernels::detected_isa())},
                        {"kernel_isa_forced", isa_forced()},
                        {"features", info.cpu_features}}}};
  if (core) {
    j["blas"]["sgemm_gflops"] = core->live_gflops;
    j["blas"]["best_core_sgemm_gflops"] = core->best_gflops;
  }
  if (model)
    j["model"] = {{"dir", model->dir},
                  {"arch", model->arch},
                  {"compute_type", model->compute_type},
                  {"parameters", model->parameters},
                  {"weights_bytes", model->weights_bytes}};
  std::cout << j.dump(2) << "\n";
}

void print_text(const RuntimeInfo& info, const std::optional<BlasCoreCheck>& core,
                const std::optional<ModelSummary>& model) {
  std::cout << "attnkit   " << info.attnkit_version << "\n"
            << "LibTorch  " << info.torch_version << "\n"
            << "BLAS      " << info.blas.name << " (" << info.blas.library << ")\n";
  if (!info.blas.detail.empty()) std::cout << "          " << info.blas.detail << "\n";
  std::cout << "threads   " << info.intra_op_threads << " intra-op, " << info.inter_op_threads
            << " inter-op, " << info.hardware_threads << " hardware\n"
            << "CPU       " << info.cpu_model << "\n"
            << "kernels   ATen " << info.torch_cpu_capability << ", attnkit "
            << kernels::to_string(kernels::cpu_isa())
            << (isa_forced() ? std::string(" (ATTNKIT_ISA; the CPU runs up to ") +
                                   kernels::to_string(kernels::detected_isa()) + ")"
                             : std::string())
            << "; features:";
  for (const auto& f : info.cpu_features) std::cout << ' ' << f;
  std::cout << "\n";
  if (model) {
    char line[200];
    std::snprintf(line, sizeof line, "model     %s: %s, %s, %.1f M parameters, model.pt %.2f MB\n",
                  model->dir.c_str(), model->arch.c_str(), model->compute_type.c_str(),
                  model->parameters / 1e6, model->weights_bytes / 1e6);
    std::cout << line;
  }
  if (core) {
    char rates[160] = "";
    if (core->best_gflops > 0)
      std::snprintf(rates, sizeof rates,
                    "\n          1024^3 SGEMM on one core: %.0f GFLOP/s with %s, %.0f "
                    "with %s (%.2fx)",
                    core->live_gflops, core->live.c_str(), core->best_gflops, core->best.c_str(),
                    core->best_gflops / core->live_gflops);
    std::cout << "note      OpenBLAS runs its " << core->live
              << " kernels, below what this CPU runs (" << core->best << ")." << rates
              << "\n          attnkit's own products do not depend on it; LibTorch's "
                 "do. The fix:\n          export OPENBLAS_CORETYPE="
              << core->best << "\n";
  }
  if (info.blas.is_reference)
    std::cerr << "\nWARNING: the reference BLAS is live; matrix products are ~30x "
                 "slower.\n  Install OpenBLAS:  apt-get install libopenblas0-pthread\n"
                 "  or select it:     update-alternatives --config "
                 "libblas.so.3-x86_64-linux-gnu\n";
}

}  // namespace

Command add_info_command(CLI::App& parent) {
  auto* app = parent.add_subcommand(
      "info", "Versions, the live BLAS, threads and CPU features (and a model's, with --model)");
  auto json = std::make_shared<bool>(false);
  auto sgemm_only = std::make_shared<bool>(false);
  auto model = std::make_shared<std::string>();
  app->add_flag("--json", *json, "Print as JSON");
  app->add_option("--model", *model,
                  "A model directory: its architecture, compute type and weights' size");
  // For check_blas_core's child process.
  app->add_flag("--sgemm-gflops", *sgemm_only, "Print the single-threaded SGEMM rate only")
      ->group("");
  return {app, [json, sgemm_only, model] {
            if (*sgemm_only) {
              std::printf("%.1f\n", measure_sgemm_gflops());
              return 0;
            }
            std::optional<ModelSummary> summary;
            if (!model->empty()) summary = summarize_model(*model);
            const RuntimeInfo info = runtime_info();
            const auto core = check_blas_core(info);
            if (*json)
              print_json(info, core, summary);
            else
              print_text(info, core, summary);
            return 0;
          }};
}

}  // namespace attnkit::cli
