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
#include "attnkit/translate/translation_json.h"
#include "attnkit/translate/translator.h"
#include "attnkit/viz/plot.h"
#include "checks.h"
#include "commands.h"

namespace attnkit::cli {
namespace {

struct TranslateArgs {
  std::string model, input, output, format = "text";
  decoding::SearchOptions search;
  size_t batch_size = 32;
  int parallel_batches = 0;
  bool timing = false;
  std::string attention_out;
  std::optional<kernels::ComputeType> compute_type;
};

// A Transformer's maps, averaged over heads, one panel per layer.
std::vector<viz::Heatmap> layer_panels(const std::vector<at::Tensor>& layers, const char* what,
                                       const std::vector<std::string>& rows,
                                       const std::vector<std::string>& cols) {
  std::vector<viz::Heatmap> panels;
  for (size_t l = 0; l < layers.size(); ++l) {
    viz::Heatmap h;
    h.weights = layers[l].mean(0);
    h.row_labels = rows;
    h.col_labels = cols;
    h.title = std::string(what) + ", layer " + std::to_string(l + 1) + " (mean of heads)";
    panels.push_back(std::move(h));
  }
  return panels;
}

// NNNN.png/.svg/.json: the attention the search kept. A Transformer adds NNNN-cross (every layer
// and head of the cross-attention) and NNNN-self (encoder and decoder self-attention per layer).
void write_attention_pictures(const TranslateArgs& a, const std::vector<std::string>& lines,
                              const std::vector<translate::Translation>& results) {
  std::filesystem::create_directories(a.attention_out);
  for (size_t i = 0; i < results.size(); ++i) {
    const auto& r = results[i];
    if (!r.attention.defined() || r.attention.numel() == 0) continue;
    viz::Heatmap h;
    h.row_labels = translate::attention_rows(r);
    h.weights = r.attention.narrow(0, 0, static_cast<int64_t>(h.row_labels.size()));
    h.col_labels = r.source_tokens;
    h.title = lines[i] + "  →  " + r.text;
    char stem[32];
    std::snprintf(stem, sizeof stem, "%04zu", i + 1);
    const auto base = (std::filesystem::path(a.attention_out) / stem).string();
    viz::render_heatmaps({h}, base + ".png");
    viz::render_heatmaps({h}, base + ".svg");
    auto json = nlohmann::json::parse(viz::heatmap_json(h));
    if (!r.cross_layers.empty()) {
      json["attention_layers"] = translate::attention_layers_json(r);
      std::vector<viz::Heatmap> cross;
      for (size_t l = 0; l < r.cross_layers.size(); ++l)
        for (int64_t head = 0; head < r.cross_layers[l].size(0); ++head) {
          viz::Heatmap c = h;
          c.weights = r.cross_layers[l][head];
          c.title = "cross, layer " + std::to_string(l + 1) + " head " + std::to_string(head + 1);
          cross.push_back(std::move(c));
        }
      auto self =
          layer_panels(r.encoder_self_layers, "encoder self", r.source_tokens, r.source_tokens);
      for (auto& p : layer_panels(r.decoder_self_layers, "decoder self", h.row_labels,
                                  translate::decoder_inputs(r)))
        self.push_back(std::move(p));
      for (const char* ext : {".png", ".svg"}) {
        viz::render_heatmaps(cross, base + "-cross" + ext);
        viz::render_heatmaps(self, base + "-self" + ext);
      }
    }
    write_file_atomic(base + ".json", json.dump(1) + "\n");
  }
  std::fprintf(stderr, "wrote %zu attention heatmaps (.png, .svg, .json) to %s\n", results.size(),
               a.attention_out.c_str());
}

int run(const TranslateArgs& a) {
  if (a.format != "text" && a.format != "json")
    throw Error("translate: --format must be text or json, got '" + a.format + "'");
  translate::Translator translator(a.model, a.compute_type);
  const auto lines = data::read_lines(a.input);
  const auto started = std::chrono::steady_clock::now();
  decoding::SearchStats stats;
  auto results = translator.translate(lines, a.search, a.batch_size, a.parallel_batches, &stats);
  const auto searched = std::chrono::steady_clock::now();
  if (a.format == "json" || !a.attention_out.empty()) translator.add_attention_maps(results);
  if (a.timing) {
    const double s = std::chrono::duration<double>(searched - started).count();
    std::fprintf(stderr,
                 "translated %zu sentences in %.3f s: %.1f sentences/s (%lld source tokens "
                 "encoded, %lld decoder rows)\n",
                 lines.size(), s, lines.size() / std::max(s, 1e-9),
                 static_cast<long long>(stats.source_tokens),
                 static_cast<long long>(stats.decoder_rows));
  }
  if (!a.attention_out.empty()) write_attention_pictures(a, lines, results);
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
    auto j = translate::translation_json(r);
    j["source"] = lines[i];
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
  checks::add_compute_type(app, a->compute_type);
  app->add_option("--attention-out", a->attention_out,
                  "Write each sentence's attention as NNNN.png, .svg and .json into DIR");
  return {app, [a] { return run(*a); }, ThreadPolicy::Blas};
}

}  // namespace attnkit::cli
