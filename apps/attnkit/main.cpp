// attnkit: attention mechanisms and attention-based sequence-to-sequence translation.

#include <c10/util/Exception.h>

#include <iostream>
#include <vector>

#include "attnkit/core/error.h"
#include "attnkit/core/info.h"
#include "attnkit/kernels/cpu/cpu_isa.h"
#include "attnkit/version.h"
#include "commands.h"

namespace attnkit::cli {
namespace {
std::vector<std::string> g_command_line;
}
const std::vector<std::string>& command_line() { return g_command_line; }
void set_command_line(int argc, char** argv) { g_command_line.assign(argv, argv + argc); }
}  // namespace attnkit::cli

int main(int argc, char** argv) {
  attnkit::cli::set_command_line(argc, argv);
  CLI::App app{"attnkit: attention mechanisms and attention-based translation, on LibTorch"};
  app.set_version_flag("--version", std::string("attnkit ") + attnkit::kVersion);
  app.require_subcommand(1);
  int threads = 0;
  app.add_option("--threads", threads, "Threads (0: one per hardware thread)")
      ->check(CLI::NonNegativeNumber);

  namespace cli = attnkit::cli;
  std::vector<cli::Command> commands = {
      cli::add_info_command(app),   cli::add_attend_command(app),    cli::add_corpus_command(app),
      cli::add_train_command(app),  cli::add_translate_command(app), cli::add_eval_command(app),
      cli::add_bleu_command(app),   cli::add_serve_command(app),     cli::add_plot_command(app),
      cli::add_export_command(app), cli::add_average_command(app),   cli::add_quantize_command(app),
      cli::add_po_command(app)};
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }

  try {
    attnkit::tune_allocator();
    attnkit::kernels::cpu_isa();  // a bad ATTNKIT_ISA is refused before any work
    for (auto& command : commands) {
      if (!command.app->parsed()) continue;
      attnkit::set_threads(threads, command.threads);
      return command.run();
    }
  } catch (const attnkit::Error& e) {
    std::cerr << "attnkit: error: " << e.what() << "\n";
    return 1;
  } catch (const c10::Error& e) {
    std::cerr << "attnkit: error: " << e.what_without_backtrace() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "attnkit: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
