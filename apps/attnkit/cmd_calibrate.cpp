// `attnkit calibrate`: fits a model's confidence (translate/confidence.h) on held-out pairs,
// writes it into the model directory, and reports how well it separates good translations
// from bad ones: its correlation with sentence chrF2, and the chrF2 of each quarter of the
// pairs ranked by it.

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <numeric>

#include "attnkit/core/error.h"
#include "attnkit/data/corpus.h"
#include "attnkit/eval/metrics.h"
#include "attnkit/translate/confidence.h"
#include "attnkit/translate/translator.h"
#include "checks.h"
#include "commands.h"

namespace attnkit::cli {
namespace {

struct CalibrateArgs {
  std::string model, valid, test, format = "text";
  decoding::SearchOptions search;
  size_t batch_size = 32;
  std::optional<kernels::ComputeType> compute_type;
};

// A set of pairs translated: each translation's features, its confidence-to-be, its sentence
// chrF2 against the reference.
struct HeldOutPairs {
  std::string path;
  std::vector<std::string> hyps, refs;
  std::vector<translate::ConfidenceFeatures> features;
  std::vector<double> chrf, confidence;
};

HeldOutPairs translate_pairs(translate::Translator& translator, const std::string& path,
                             const CalibrateArgs& a) {
  data::ReadReport report;
  const auto pairs = data::read_tsv(path, {}, &report);
  for (const auto& p : report.problems) std::cerr << "warning: " << p << " (skipped)\n";
  if (pairs.empty()) throw Error(path + ": no pairs");
  HeldOutPairs s;
  s.path = path;
  std::vector<std::string> sources;
  for (const auto& p : pairs) {
    sources.push_back(p.source);
    s.refs.push_back(p.target);
  }
  const auto out = translator.translate(sources, a.search, a.batch_size, /*parallel_batches=*/0);
  for (size_t i = 0; i < out.size(); ++i) {
    s.hyps.push_back(out[i].text);
    s.features.push_back(translate::confidence_features(out[i]));
    s.chrf.push_back(eval::sentence_chrf(out[i].text, {s.refs[i]}));
  }
  return s;
}

// The pairs in four quarters by confidence, lowest first: for each, the mean confidence, the
// mean sentence chrF2 and the corpus chrF2.
nlohmann::json quarters(const HeldOutPairs& s) {
  std::vector<size_t> order(s.confidence.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t x, size_t y) { return s.confidence[x] < s.confidence[y]; });
  nlohmann::json out = nlohmann::json::array();
  for (size_t q = 0; q < 4; ++q) {
    const size_t from = order.size() * q / 4, to = order.size() * (q + 1) / 4;
    std::vector<std::string> hyps, refs;
    double confidence = 0, chrf = 0;
    for (size_t k = from; k < to; ++k) {
      hyps.push_back(s.hyps[order[k]]);
      refs.push_back(s.refs[order[k]]);
      confidence += s.confidence[order[k]];
      chrf += s.chrf[order[k]];
    }
    const double n = std::max<double>(1, static_cast<double>(to - from));
    out.push_back({{"pairs", to - from},
                   {"mean_confidence", confidence / n},
                   {"mean_sentence_chrf", chrf / n},
                   {"chrf", hyps.empty() ? 0.0 : eval::corpus_chrf(hyps, refs)}});
  }
  return out;
}

nlohmann::json report_of(const HeldOutPairs& s) {
  return {{"file", s.path},
          {"pairs", s.hyps.size()},
          {"pearson", translate::pearson(s.confidence, s.chrf)},
          {"chrf", eval::corpus_chrf(s.hyps, s.refs)},
          {"quarters", quarters(s)}};
}

void print_report(const nlohmann::json& r) {
  std::printf("%s: %zu pairs, chrF2 %.2f; correlation of the confidence with sentence chrF2 %.3f\n",
              r["file"].get<std::string>().c_str(), r["pairs"].get<size_t>(),
              r["chrf"].get<double>(), r["pearson"].get<double>());
  std::printf("  quarter by confidence   pairs  mean confidence  mean sentence chrF2  chrF2\n");
  const char* names[] = {"lowest", "second", "third", "highest"};
  for (size_t q = 0; q < 4; ++q) {
    const auto& x = r["quarters"][q];
    std::printf("  %-21s %7zu  %15.3f  %19.2f  %5.2f\n", names[q], x["pairs"].get<size_t>(),
                x["mean_confidence"].get<double>(), x["mean_sentence_chrf"].get<double>(),
                x["chrf"].get<double>());
  }
}

int run_calibrate(const CalibrateArgs& a) {
  translate::Translator translator(a.model, a.compute_type);
  HeldOutPairs valid = translate_pairs(translator, a.valid, a);
  const auto confidence = translate::Confidence::fit(valid.features, valid.chrf);
  for (const auto& f : valid.features) valid.confidence.push_back(confidence(f));
  confidence.save(a.model);

  nlohmann::json out = {{"model", a.model},
                        {"written", a.model + "/" + translate::kConfidenceFile},
                        {"confidence", nlohmann::json::parse(confidence.to_json())},
                        {"fit", report_of(valid)}};
  if (!a.test.empty()) {
    HeldOutPairs test = translate_pairs(translator, a.test, a);
    for (const auto& f : test.features) test.confidence.push_back(confidence(f));
    out["test"] = report_of(test);
  }
  if (a.format == "json") {
    std::printf("%s\n", out.dump(2).c_str());
    return 0;
  }
  std::printf("fitted on %zu pairs; written to %s\n  weights (per standard deviation):",
              valid.hyps.size(), out["written"].get<std::string>().c_str());
  const auto& names = translate::ConfidenceFeatures::names();
  for (size_t k = 0; k < names.size(); ++k)
    std::printf(" %s %+.2f", names[k], out["confidence"]["weight"][k].get<double>());
  std::printf("\n");
  print_report(out["fit"]);
  if (out.contains("test")) print_report(out["test"]);
  return 0;
}

}  // namespace

Command add_calibrate_command(CLI::App& parent) {
  auto* app = parent.add_subcommand(
      "calibrate",
      "Fit a model's confidence on held-out pairs (written to its confidence.json, which po "
      "translate reads) and report how it separates good translations from bad");
  auto a = std::make_shared<CalibrateArgs>();
  app->add_option("--model", a->model, "Model directory")
      ->required()
      ->check(CLI::ExistingDirectory);
  app->add_option("--valid", a->valid,
                  "Held-out pairs to fit on, source<TAB>target (whole packages training never saw)")
      ->required()
      ->check(CLI::ExistingFile);
  app->add_option("--test", a->test, "Other held-out pairs, to report on only")
      ->check(CLI::ExistingFile);
  app->add_option("--beam", a->search.beam_size, "Beam size, as the model will be used")
      ->check(checks::at_least(1))
      ->capture_default_str();
  checks::add_search_penalties(app, a->search);
  app->add_option("--batch-size", a->batch_size)->check(checks::at_least(1))->capture_default_str();
  app->add_option("--format", a->format, "text | json")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  checks::add_compute_type(app, a->compute_type);
  return {app, [a] { return run_calibrate(*a); }, ThreadPolicy::Blas};
}

}  // namespace attnkit::cli
