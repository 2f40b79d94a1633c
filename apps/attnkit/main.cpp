// attnkit: attention mechanisms and attention-based sequence-to-sequence translation.

#include <c10/util/Exception.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
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

namespace {

// A command's exit status, once what it printed is known to have been written: output to a full
// disk or /dev/full fails at the last flush, and a command that reported success would have lost
// it silently.
int checked_output(int status) {
  std::cout.flush();
  const bool failed = !std::cout || std::fflush(stdout) != 0 || std::ferror(stdout);
  if (!failed) return status;
  const int error = errno;
  std::cerr << "attnkit: error: writing the output failed (" << std::strerror(error ? error : EIO)
            << "); what was printed is incomplete\n";
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  attnkit::cli::set_command_line(argc, argv);
  CLI::App app{"attnkit: attention mechanisms and attention-based translation, on LibTorch"};
  app.set_version_flag("--version", std::string("attnkit ") + attnkit::kVersion);
  app.require_subcommand(1);
  int threads = 0;
  // More threads than 1024 are no machine's (and 10^8 of them would exhaust memory first).
  app.add_option("--threads", threads, "Threads (0: one per hardware thread)")
      ->check(CLI::Range(0, 1024));

  namespace cli = attnkit::cli;
  std::vector<cli::Command> commands = {
      cli::add_info_command(app),      cli::add_attend_command(app),
      cli::add_corpus_command(app),    cli::add_train_command(app),
      cli::add_translate_command(app), cli::add_eval_command(app),
      cli::add_bleu_command(app),      cli::add_serve_command(app),
      cli::add_plot_command(app),      cli::add_export_command(app),
      cli::add_average_command(app),   cli::add_quantize_command(app),
      cli::add_po_command(app),        cli::add_upgrade_command(app),
      cli::add_calibrate_command(app), cli::add_score_command(app)};
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
      return checked_output(command.run());
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
