// `attnkit translate`: one sentence a line from stdin or a file, greedy or beam search.

#include <ATen/ATen.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "attnkit/core/error.h"
#include "attnkit/core/files.h"
#include "attnkit/data/corpus.h"
#include "attnkit/data/text.h"
#include "attnkit/io/pt_file.h"
#include "attnkit/seq2seq/translator.h"
#include "attnkit/viz/plot.h"
#include "checks.h"
#include "commands.h"

namespace attnkit::cli {
namespace {

struct TranslateArgs {
  std::string model, input, output, format = "text";
  seq2seq::SearchOptions search;
  size_t batch_size = 32;
  int parallel_batches = 0;
  bool timing = false;
  std::string attention_out;
};

int run(const TranslateArgs& a) {
  if (a.format != "text" && a.format != "json")
    throw Error("translate: --format must be text or json, got '" + a.format + "'");
  seq2seq::Translator translator(a.model);
  const auto lines = data::read_lines(a.input);
  const auto started = std::chrono::steady_clock::now();
  seq2seq::SearchStats stats;
  auto results = translator.translate(lines, a.search, a.batch_size, a.parallel_batches, &stats);
  if (a.timing) {
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    std::fprintf(stderr,
                 "translated %zu sentences in %.3f s: %.1f sentences/s (%lld source tokens "
                 "encoded, %lld decoder rows)\n",
                 lines.size(), s, lines.size() / std::max(s, 1e-9),
                 static_cast<long long>(stats.source_tokens),
                 static_cast<long long>(stats.decoder_rows));
  }
  if (!a.attention_out.empty()) {
    std::filesystem::create_directories(a.attention_out);
    for (size_t i = 0; i < results.size(); ++i) {
      const auto& r = results[i];
      if (!r.attention.defined() || r.attention.numel() == 0) continue;
      viz::Heatmap h;
      h.row_labels = seq2seq::attention_rows(r);
      h.weights = r.attention.narrow(0, 0, static_cast<int64_t>(h.row_labels.size()));
      h.col_labels = r.source_tokens;
      h.title = lines[i] + "  →  " + r.text;
      char stem[32];
      std::snprintf(stem, sizeof stem, "%04zu", i + 1);
      const auto base = (std::filesystem::path(a.attention_out) / stem).string();
      viz::render_heatmaps({h}, base + ".png");
      viz::render_heatmaps({h}, base + ".svg");
      write_file_atomic(base + ".json", viz::heatmap_json(h) + "\n");
    }
    std::fprintf(stderr, "wrote %zu attention heatmaps (.png, .svg, .json) to %s\n", results.size(),
                 a.attention_out.c_str());
  }
  std::string out;
  for (size_t i = 0; i < results.size(); ++i) {
    const auto& r = results[i];
    if (a.format == "text") {
      if (a.search.nbest > 1) {
        for (const auto& [text, score] : r.nbest) out += text + "\t" + std::to_string(score) + "\n";
      } else {
        out += r.text + "\n";
      }
      continue;
    }
    nlohmann::json j = {{"source", lines[i]},
                        {"translation", r.text},
                        {"source_tokens", r.source_tokens},
                        {"target_tokens", r.target_tokens},
                        {"score", r.score},
                        {"attention", viz::rounded_rows(r.attention)},
                        {"attention_rows", seq2seq::attention_rows(r)}};
    nlohmann::json nbest = nlohmann::json::array();
    for (const auto& [text, score] : r.nbest)
      nbest.push_back({{"translation", text}, {"score", score}});
    j["nbest"] = nbest;
    out += j.dump() + "\n";
  }
  if (a.output.empty()) {
    std::cout << out;
  } else {
    write_file_atomic(a.output, out);
  }
  return 0;
}

}  // namespace

Command add_translate_command(CLI::App& parent) {
  auto* app =
      parent.add_subcommand("translate", "Translate one sentence a line (stdin or --input)");
  auto a = std::make_shared<TranslateArgs>();
  app->add_option("--model", a->model, "Model directory from attnkit train")->required();
  app->add_option("--input", a->input, "Input file (default: stdin)");
  app->add_option("--output", a->output, "Output file (default: stdout)");
  app->add_option("--format", a->format, "text | json (tokens, scores, attention matrix)")
      ->capture_default_str();
  app->add_option("--beam", a->search.beam_size, "Beam size (1: greedy)")
      ->check(checks::at_least(1))
      ->capture_default_str();
  app->add_option("--nbest", a->search.nbest, "Hypotheses per sentence")
      ->check(checks::at_least(1))
      ->capture_default_str();
  app->add_option("--length-penalty", a->search.length_penalty, "Score / length^alpha")
      ->check(checks::non_negative())
      ->capture_default_str();
  app->add_option("--max-length-ratio", a->search.max_length_ratio)
      ->check(checks::positive())
      ->capture_default_str();
  app->add_option("--batch-size", a->batch_size)->check(checks::at_least(1))->capture_default_str();
  app->add_option("--parallel-batches", a->parallel_batches,
                  "Batches translated at once, one per thread (0: one per --threads; 1: one "
                  "batch at a time on all threads)")
      ->check(checks::non_negative())
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app->add_flag("--timing", a->timing, "Report sentences/s (model loading excluded) on stderr");
  app->add_option("--attention-out", a->attention_out,
                  "Write each sentence's attention as NNNN.png, .svg and .json into DIR");
  return {app, [a] { return run(*a); }, ThreadPolicy::Blas};
}

}  // namespace attnkit::cli
