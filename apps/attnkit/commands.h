#pragma once

#include <CLI/CLI.hpp>

#include "attnkit/core/info.h"

#include <functional>
#include <string>
#include <vector>

namespace attnkit::cli {

// A subcommand: its CLI11 parser and what runs once it is parsed (returns the exit code).
struct Command {
  CLI::App* app = nullptr;
  std::function<int()> run;
  // Recurrent-model commands (train, translate, eval, serve) give the cores to OpenBLAS.
  ThreadPolicy threads = ThreadPolicy::IntraOp;
};

// The process's command line (for commands that start copies of themselves).
const std::vector<std::string>& command_line();
void set_command_line(int argc, char** argv);

Command add_info_command(CLI::App& parent);
Command add_attend_command(CLI::App& parent);
Command add_corpus_command(CLI::App& parent);
Command add_train_command(CLI::App& parent);
Command add_translate_command(CLI::App& parent);
Command add_eval_command(CLI::App& parent);
Command add_calibrate_command(CLI::App& parent);
Command add_score_command(CLI::App& parent);
Command add_bleu_command(CLI::App& parent);
Command add_serve_command(CLI::App& parent);
Command add_plot_command(CLI::App& parent);
Command add_export_command(CLI::App& parent);
Command add_average_command(CLI::App& parent);
Command add_quantize_command(CLI::App& parent);
Command add_po_command(CLI::App& parent);
Command add_upgrade_command(CLI::App& parent);

}  // namespace attnkit::cli
