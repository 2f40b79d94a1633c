// `attnkit score`: the model's log-probability of given source/target pairs, per sentence and
// per token (Marian's scorer, CTranslate2's score_batch), for filtering a corpus and for seeing
// where the model disagrees with a translation.

#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "attnkit/core/error.h"
#include "attnkit/core/files.h"
#include "attnkit/data/corpus.h"
#include "attnkit/translate/translation_json.h"
#include "attnkit/translate/translator.h"
#include "checks.h"
#include "commands.h"

namespace attnkit::cli {
namespace {

struct ScoreArgs {
  std::string model, input, output, format = "text";
  size_t batch_size = 32;
  double length_penalty = 1.0;
  std::optional<kernels::ComputeType> compute_type;
};

int run_score(const ScoreArgs& a) {
  data::ReadReport report;
  const auto pairs = data::read_tsv(a.input, {}, &report);
  for (const auto& p : report.problems) std::cerr << "warning: " << p << " (skipped)\n";
  if (pairs.empty()) throw Error(a.input + ": no pairs");
  std::vector<std::string> sources, targets;
  for (const auto& p : pairs) {
    sources.push_back(p.source);
    targets.push_back(p.target);
  }
  translate::Translator translator(a.model, a.compute_type);
  const auto scores = translator.score(sources, targets, a.batch_size, a.length_penalty);
  std::string out;
  for (size_t i = 0; i < scores.size(); ++i) {
    const auto& s = scores[i];
    if (a.format == "text") {
      char line[64];
      std::snprintf(line, sizeof line, "%.6f\n", s.score);
      out += line;
      continue;
    }
    nlohmann::json j = {
        {"source", sources[i]},
        {"target", targets[i]},
        {"source_tokens", s.source_tokens},
        {"target_tokens", s.target_tokens},
        {"token_log_probs", s.token_log_probs},
        {"log_prob", s.log_prob},
        {"score", s.score},
        {"alignment", translate::pharaoh_alignment(s.attention, s.target_tokens.size())}};
    out += j.dump() + "\n";
  }
  if (a.output.empty())
    std::cout << out;
  else
    write_file_atomic(a.output, out);
  return 0;
}

}  // namespace

Command add_score_command(CLI::App& parent) {
  auto* app = parent.add_subcommand(
      "score",
      "The model's log-probability of given translations: one score a pair (text), or per token "
      "with the word alignments (json, one object a line)");
  auto a = std::make_shared<ScoreArgs>();
  app->add_option("--model", a->model, "Model directory")->required();
  app->add_option("--input", a->input, "Pairs to score, source<TAB>target")
      ->required()
      ->check(CLI::ExistingFile);
  app->add_option("--output", a->output, "Output file (default: stdout)");
  app->add_option("--format", a->format, "text (the normalised score) | json")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  app->add_option("--length-penalty", a->length_penalty,
                  "The score is the log-probability / (tokens + 1)^alpha, as the search's")
      ->check(checks::non_negative())
      ->capture_default_str();
  app->add_option("--batch-size", a->batch_size)->check(checks::at_least(1))->capture_default_str();
  checks::add_compute_type(app, a->compute_type);
  return {app, [a] { return run_score(*a); }, ThreadPolicy::Blas};
}

}  // namespace attnkit::cli
