#pragma once

#include <CLI/CLI.hpp>

#include <functional>

namespace attnkit::cli {

// `corpus debian` (cmd_corpus_debian.cpp), a subcommand of `corpus`; `run` is set to what runs
// once it is parsed.
CLI::App* add_corpus_debian_command(CLI::App* parent, std::function<int()>& run);

}  // namespace attnkit::cli
