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
#include "attnkit/translate/confidence.h"
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
  bool timing = false, alignment = false;
  size_t alternatives = 0, max_batch_tokens = 0;
  std::string attention_out, target_prefix;
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

// --return-alternatives: for each line, the alternatives at the position after its prefix.
int run_alternatives(const TranslateArgs& a, translate::Translator& translator,
                     const std::vector<std::string>& lines,
                     const std::vector<std::string>& prefixes) {
  const auto all = translator.alternatives(lines, prefixes, a.alternatives, a.search, a.batch_size);
  std::string out;
  for (size_t i = 0; i < all.size(); ++i) {
    if (a.format == "text") {
      for (const auto& alt : all[i])
        out += alt.translation.text + "\t" + std::to_string(alt.token_log_prob) + "\n";
      out += "\n";  // a blank line after each input's alternatives
      continue;
    }
    nlohmann::json list = nlohmann::json::array();
    for (const auto& alt : all[i]) {
      auto j = translate::translation_json(alt.translation);
      j["token"] = alt.token;
      j["token_log_prob"] = alt.token_log_prob;
      list.push_back(std::move(j));
    }
    out += nlohmann::json({{"source", lines[i]}, {"alternatives", list}}).dump() + "\n";
  }
  if (a.output.empty())
    std::cout << out;
  else
    write_file_atomic(a.output, out);
  return 0;
}

int run(const TranslateArgs& a) {
  if (a.format != "text" && a.format != "json")
    throw Error("translate: --format must be text or json, got '" + a.format + "'");
  translate::Translator translator(a.model, a.compute_type);
  translator.set_max_batch_tokens(a.max_batch_tokens);
  const auto lines = data::read_lines(a.input);
  if (a.search.sampling_topk != 1 && a.search.beam_size != 1)
    throw Error("translate: --sampling-topk samples in greedy search: give --beam 1");
  std::vector<std::string> prefixes;
  if (!a.target_prefix.empty()) {
    prefixes = data::read_lines(a.target_prefix);
    if (prefixes.size() != lines.size())
      throw Error(a.target_prefix + ": " + std::to_string(prefixes.size()) + " prefixes for " +
                  std::to_string(lines.size()) + " input lines");
  }
  if (a.alternatives > 0) return run_alternatives(a, translator, lines, prefixes);
  const auto started = std::chrono::steady_clock::now();
  decoding::SearchStats stats;
  auto results =
      translator.translate(lines, a.search, a.batch_size, a.parallel_batches, &stats, prefixes);
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
  // A calibrated model's confidence per translation (attnkit calibrate), in JSON output.
  const auto confidence = translate::Confidence::load(a.model);
  std::string out;
  for (size_t i = 0; i < results.size(); ++i) {
    const auto& r = results[i];
    if (a.format == "text") {
      if (a.search.nbest > 1) {
        for (const auto& [text, score] : r.nbest) out += text + "\t" + std::to_string(score) + "\n";
      } else {
        out += r.text;
        if (a.alignment)  // Marian's --alignment: the translation, " ||| ", the pairs
          out += " ||| " + translate::pharaoh_alignment(r.attention, r.target_tokens.size());
        out += "\n";
      }
      continue;
    }
    auto j = translate::translation_json(r);
    j["source"] = lines[i];
    if (confidence.fitted()) j["confidence"] = confidence(r);
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
  app->add_flag("--alignment", a->alignment,
                "Text format: each translation followed by \" ||| \" and its word alignments in "
                "the Pharaoh format (source-target, \"0-0 2-1\"), from the attention");
  app->add_option("--nbest", a->search.nbest, "Hypotheses per sentence")
      ->check(checks::at_least(1))
      ->capture_default_str();
  app->add_option("--length-penalty", a->search.length_penalty, "Score / length^alpha")
      ->check(checks::non_negative())
      ->capture_default_str();
  checks::add_search_penalties(app, a->search);
  checks::add_sampling(app, a->search);
  app->add_option("--return-alternatives", a->alternatives,
                  "The N most likely tokens at the position after the prefix (or the first), "
                  "each continued by the search: N translations per line, with the token's "
                  "log-probability")
      ->check(checks::range(0, 100))
      ->capture_default_str();
  app->add_option("--target-prefix", a->target_prefix,
                  "A file of one line per input line: each translation starts with its line "
                  "(an empty line: no prefix)")
      ->check(CLI::ExistingFile);
  app->add_option("--max-length-ratio", a->search.max_length_ratio)
      ->check(checks::positive())
      ->capture_default_str();
  app->add_option("--batch-size", a->batch_size)->check(checks::at_least(1))->capture_default_str();
  app->add_option("--max-batch-tokens", a->max_batch_tokens,
                  "At most this many source tokens a batch, padding counted (0: --batch-size "
                  "sentences alone)")
      ->check(checks::non_negative())
      ->capture_default_str();
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
