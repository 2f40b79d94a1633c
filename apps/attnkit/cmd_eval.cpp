// `attnkit eval` (a model on a test set) and `attnkit bleu` (hypotheses against references).

#include <ATen/ATen.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>

#include "attnkit/core/error.h"
#include "attnkit/data/corpus.h"
#include "attnkit/data/synthetic.h"
#include "attnkit/data/text.h"
#include "attnkit/eval/metrics.h"
#include "attnkit/translate/translator.h"
#include "checks.h"
#include "commands.h"

namespace attnkit::cli {
namespace {

struct EvalArgs {
  std::string model, baseline, test, tokenize = "auto";
  decoding::SearchOptions search;
  size_t bucket = 10, examples = 3;
  bool reverse = false;
  std::optional<kernels::ComputeType> compute_type;
  // bleu
  std::vector<std::string> refs;
  std::string hyp;
  bool lowercase = false, chrf_lowercase = false, sentence_level = false;
  int chrf_word_order = 0;
};

struct Scored {
  std::vector<std::string> hyps;
  std::vector<translate::Translation> translations;
};

// Strongest alignments: for each target token, the source token it attends to most.
std::string alignments_of(const translate::Translation& t) {
  std::string out;
  if (!t.attention.defined() || t.attention.numel() == 0) return out;
  for (size_t j = 0; j < t.target_tokens.size() && static_cast<int64_t>(j) < t.attention.size(0);
       ++j) {
    auto row = t.attention[static_cast<int64_t>(j)];
    const int64_t i = row.argmax().item<int64_t>();
    char buf[32];
    std::snprintf(buf, sizeof buf, " (%.2f)", row[i].item<float>());
    out += "    " + t.target_tokens[j] + " <- " + t.source_tokens[i] + buf + "\n";
  }
  return out;
}

int run_eval(const EvalArgs& a) {
  data::TsvOptions tsv;
  tsv.reverse = a.reverse;
  data::ReadReport report;
  auto pairs = data::read_tsv(a.test, tsv, &report);
  for (const auto& p : report.problems) std::cerr << "warning: " << p << " (skipped)\n";
  if (pairs.empty()) throw Error(a.test + ": no test pairs");
  std::vector<std::string> sources, refs;
  for (const auto& p : pairs) {
    sources.push_back(p.source);
    refs.push_back(p.target);
  }
  auto score_model = [&](const std::string& dir) {
    translate::Translator translator(dir, a.compute_type);
    Scored s;
    s.translations = translator.translate(sources, a.search, 32, /*parallel_batches=*/0);
    for (const auto& t : s.translations) s.hyps.push_back(t.text);
    return std::make_pair(std::move(s),
                          eval::bleu_tokenizer_for(translator.config().target_lang,
                                                   translator.config().target_tokenizer));
  };
  auto [main, auto_tokenizer] = score_model(a.model);
  eval::BleuOptions bo;
  bo.tokenize = a.tokenize == "auto" ? auto_tokenizer : a.tokenize;
  const auto bleu = eval::corpus_bleu(main.hyps, {refs}, bo);
  std::printf("%s\n", bleu.format().c_str());
  std::printf("chrF2 = %.2f\n", eval::corpus_chrf(main.hyps, refs));

  Scored base;
  if (!a.baseline.empty()) {
    base = score_model(a.baseline).first;
    std::printf("baseline: %s, chrF2 = %.2f\n",
                eval::corpus_bleu(base.hyps, {refs}, bo).format().c_str(),
                eval::corpus_chrf(base.hyps, refs));
  }
  // BLEU by source length, the shape of Bahdanau et al. (2015), Figure 2.
  std::map<size_t, std::vector<size_t>> buckets;
  for (size_t i = 0; i < pairs.size(); ++i)
    buckets[main.translations[i].source_tokens.size() / a.bucket * a.bucket].push_back(i);
  std::printf("\nsource length  sentences  BLEU%s\n", a.baseline.empty() ? "" : "  baseline BLEU");
  for (const auto& [start, members] : buckets) {
    std::vector<std::string> h, r, hb;
    for (size_t i : members) {
      h.push_back(main.hyps[i]);
      r.push_back(refs[i]);
      if (!a.baseline.empty()) hb.push_back(base.hyps[i]);
    }
    std::printf("%5zu-%-6zu %10zu  %5.2f", start, start + a.bucket - 1, members.size(),
                eval::corpus_bleu(h, {r}, bo).score);
    if (!a.baseline.empty()) std::printf("  %13.2f", eval::corpus_bleu(hb, {r}, bo).score);
    std::printf("\n");
  }
  // Alignment error rate where the test set carries gold alignments (third column).
  double aer_sum = 0;
  size_t aer_n = 0;
  for (size_t i = 0; i < pairs.size(); ++i) {
    if (pairs[i].extra.empty()) continue;
    eval::Alignment gold;
    try {
      gold = data::parse_alignment(pairs[i].extra);
    } catch (const Error&) {
      continue;  // an attribution column, not an alignment
    }
    const auto& t = main.translations[i];
    eval::Alignment predicted;
    for (int64_t j = 0; j < t.attention.size(0) && j < static_cast<int64_t>(t.target_tokens.size());
         ++j)
      predicted.insert(
          {static_cast<int>(t.attention[j].argmax().item<int64_t>()), static_cast<int>(j)});
    aer_sum += eval::alignment_error_rate(predicted, gold, gold);
    ++aer_n;
  }
  if (aer_n)
    std::printf("\nalignment error rate (attention argmax vs gold, %zu sentences): %.4f\n", aer_n,
                aer_sum / aer_n);
  for (size_t i = 0; i < std::min(a.examples, pairs.size()); ++i) {
    const auto& t = main.translations[i];
    std::printf("\nsource:      %s\nreference:   %s\ntranslation: %s\n", sources[i].c_str(),
                refs[i].c_str(), t.text.c_str());
    std::printf("  strongest alignments:\n%s", alignments_of(t).c_str());
  }
  return 0;
}

int run_bleu(const EvalArgs& a) {
  const auto hyps = data::read_lines(a.hyp);
  std::vector<std::vector<std::string>> refs;
  for (const auto& path : a.refs) {
    refs.push_back(data::read_lines(path));
    if (refs.back().size() != hyps.size())
      throw Error(path + ": " + std::to_string(refs.back().size()) + " references for " +
                  std::to_string(hyps.size()) + " hypotheses" +
                  (a.hyp.empty() ? std::string() : " in " + a.hyp));
  }
  eval::BleuOptions bo;
  bo.tokenize = a.tokenize == "auto" ? "13a" : a.tokenize;
  bo.lowercase = a.lowercase;
  eval::ChrfOptions co;
  co.word_order = a.chrf_word_order;
  co.lowercase = a.chrf_lowercase;
  const std::string chrf_name = co.word_order > 0 ? "chrF2++" : "chrF2";
  if (!a.sentence_level) {
    std::printf("%s\n", eval::corpus_bleu(hyps, refs, bo).format().c_str());
    std::printf("%s = %.2f\n", chrf_name.c_str(), eval::corpus_chrf(hyps, refs, co));
    std::printf("TER = %.2f\n", eval::corpus_ter(hyps, refs).score);
    return 0;
  }
  for (size_t i = 0; i < hyps.size(); ++i) {  // one line per hypothesis
    std::vector<std::string> line_refs;
    for (const auto& stream : refs) line_refs.push_back(stream[i]);
    std::printf("BLEU = %.2f\t%s = %.2f\n", eval::sentence_bleu(hyps[i], line_refs, bo).score,
                chrf_name.c_str(), eval::sentence_chrf(hyps[i], line_refs, co));
  }
  return 0;
}

}  // namespace

Command add_eval_command(CLI::App& parent) {
  auto* app =
      parent.add_subcommand("eval", "BLEU, chrF, BLEU by length and AER of a model on a test set");
  auto a = std::make_shared<EvalArgs>();
  app->add_option("--model", a->model, "Model directory")->required();
  app->add_option("--test", a->test, "Test pairs, source<TAB>target[<TAB>gold alignment]")
      ->required();
  app->add_option("--baseline", a->baseline,
                  "A second model (e.g. --no-attention) to compare by length");
  app->add_option("--tokenize", a->tokenize, "BLEU tokenizer: auto | 13a | zh | intl | char | none")
      ->capture_default_str();
  app->add_option("--beam", a->search.beam_size)->check(checks::at_least(1))->capture_default_str();
  checks::add_search_penalties(app, a->search);
  app->add_option("--bucket", a->bucket, "Source-length bucket width")
      ->check(checks::at_least(1))
      ->capture_default_str();
  app->add_option("--examples", a->examples, "Translations to show")
      ->check(checks::non_negative())
      ->capture_default_str();
  app->add_flag("--reverse", a->reverse);
  checks::add_compute_type(app, a->compute_type);
  return {app, [a] { return run_eval(*a); }, ThreadPolicy::Blas};
}

Command add_bleu_command(CLI::App& parent) {
  auto* app =
      parent.add_subcommand("bleu", "Corpus BLEU, chrF and TER, as sacreBLEU 2.6 computes them");
  auto a = std::make_shared<EvalArgs>();
  app->add_option("--ref", a->refs, "References, one a line; repeat for several references")
      ->required()
      ->check(CLI::ExistingFile);
  app->add_option("--hyp", a->hyp, "Hypotheses (default: stdin)")->check(CLI::ExistingFile);
  app->add_option("--tokenize", a->tokenize, "BLEU tokenizer: 13a | zh | intl | char | none")
      ->check(CLI::IsMember({"auto", "13a", "zh", "intl", "char", "none"}))
      ->capture_default_str();
  app->add_flag("--lowercase", a->lowercase, "Lowercase before BLEU");
  app->add_flag("--chrf-lowercase", a->chrf_lowercase, "Lowercase before chrF");
  app->add_option("--chrf-word-order", a->chrf_word_order, "Word n-gram order: 2 gives chrF++")
      ->check(CLI::Range(0, 9))
      ->capture_default_str();
  app->add_flag("--sentence-level", a->sentence_level,
                "A score per hypothesis (BLEU with effective order, as sacreBLEU's)");
  return {app, [a] { return run_bleu(*a); }};
}

}  // namespace attnkit::cli
