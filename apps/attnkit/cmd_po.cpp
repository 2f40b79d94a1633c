// `attnkit po translate` and `attnkit po stats`: gettext catalogs pre-translated for the people
// who translate them (include/attnkit/po/pretranslate.h).

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <optional>

#include <nlohmann/json.hpp>

#include "attnkit/core/error.h"
#include "attnkit/data/po_catalog.h"
#include "attnkit/po/check.h"
#include "attnkit/po/pretranslate.h"
#include "attnkit/translate/translator.h"
#include "checks.h"
#include "commands.h"

namespace attnkit::cli {
namespace fs = std::filesystem;
namespace {

struct PoTranslateArgs {
  std::string model, input, out, lang, glossary;
  std::vector<std::string> compendia;
  bool no_protect = false, no_memory = false, quiet = false;
  std::optional<kernels::ComputeType> compute_type;
  po::PretranslateOptions options;
};

// The translation memory: the compendia, then the model's training pairs when they are still
// where training read them.
po::Memory load_memory(const PoTranslateArgs& a, const translate::Translator& translator) {
  po::Memory memory;
  if (a.no_memory) return memory;
  for (const auto& c : a.compendia) memory.add_catalog(data::PoCatalog::read(c));
  const auto& corpus = translator.config().train_corpus;
  if (!corpus.empty() && fs::exists(corpus))
    memory.add_corpus(corpus);
  else if (!corpus.empty() && !a.quiet)
    std::cerr << "po translate: the training pairs " << corpus
              << " are gone: no translation memory from them\n";
  return memory;
}

int translate(PoTranslateArgs a) {
  // Read and check everything before the model loads: a malformed catalog costs nothing.
  auto catalog = data::PoCatalog::read(a.input);
  const auto confidence = translate::Confidence::load(a.model);
  if (a.options.min_confidence > 0 && !confidence.fitted())
    throw Error(a.model + ": --min-confidence needs the model's " + translate::kConfidenceFile +
                " (attnkit calibrate --model " + a.model + " --valid VALID.tsv)");
  a.options.confidence = &confidence;
  const auto glossary = a.glossary.empty() ? po::Glossary() : po::Glossary::read(a.glossary);
  if (!a.glossary.empty()) a.options.glossary = &glossary;
  translate::Translator translator(a.model, a.compute_type);
  const auto memory = load_memory(a, translator);
  a.options.lang = a.lang;
  a.options.protect = !a.no_protect;
  a.options.use_memory = !a.no_memory;
  const bool tty = isatty(STDERR_FILENO);
  if (!a.quiet)
    a.options.on_progress = [tty](size_t done, size_t total) {
      if (tty) std::fprintf(stderr, "\rpo translate: %zu / %zu lines", done, total);
      if (tty && done == total) std::fprintf(stderr, "\n");
    };
  const auto r = po::pretranslate(catalog, translator, memory, a.options);
  catalog.save(a.out);  // atomic: a failure leaves no partial file
  if (!a.quiet)
    std::cerr << a.out << ": " << r.entries << " messages: " << r.translated
              << " already translated, " << r.memory << " from translation memory"
              << (r.fuzzy_memory ? " (" + std::to_string(r.fuzzy_memory) + " of them fuzzy)" : "")
              << ", " << r.model << " by the model (" << r.segments << " lines"
              << (r.low_confidence ? ", " + std::to_string(r.low_confidence) +
                                         " more left untranslated under --min-confidence"
                                   : "")
              << (r.glossary_terms ? ", " + std::to_string(r.glossary_terms) + " glossary terms"
                                   : "")
              << "), " << r.copied << " copied (nothing to translate)"
              << (a.options.refresh_fuzzy ? "; of the fuzzy entries whose msgid changed, " +
                                                std::to_string(r.refreshed) + " carried over, " +
                                                std::to_string(r.resuggested) + " suggested anew"
                                          : "")
              << "; placeholders, markup and accelerators intact in " << r.survived << " of "
              << (r.memory + r.model + r.copied + r.refreshed)
              << " filled; suggestions are marked fuzzy for review\n";
  return 0;
}

int stats(const std::vector<std::string>& files, const std::string& format) {
  nlohmann::json all = nlohmann::json::array();
  for (const auto& f : files) {
    const auto s = po::stats(data::PoCatalog::read(f));
    if (format == "json") {
      all.push_back({{"file", f},
                     {"translated", s.translated},
                     {"fuzzy", s.fuzzy},
                     {"untranslated", s.untranslated},
                     {"obsolete", s.obsolete},
                     {"memory", s.memory},
                     {"model", s.model},
                     {"checked", s.checked},
                     {"intact", s.survived},
                     {"damaged_lines", s.damaged}});
      continue;
    }
    std::cout << f << ": " << s.translated << " translated, " << s.fuzzy << " fuzzy, "
              << s.untranslated << " untranslated, " << s.obsolete
              << " obsolete; filled by attnkit: " << s.memory << " from memory, " << s.model
              << " by the model; placeholders, markup "
              << "and accelerators intact in " << s.survived << " of " << s.checked << "\n";
    for (size_t line : s.damaged)
      std::cout << f << ":" << line << ": a placeholder, markup, accelerator or surrounding "
                << "whitespace of the msgid is missing from the translation\n";
  }
  if (format == "json") std::cout << all.dump(2) << "\n";
  return 0;
}

struct PoCheckArgs {
  std::vector<std::string> files;
  std::string format = "text", lang, glossary;
  bool fuzzy = false;
};

// Each finding as file:line: kind: message (or JSON), then a count per kind on stderr; exit 1
// when there is any, so that a build or a CI job can stop on them. A catalog that cannot be
// read is reported and the rest are checked; exit 2 then.
int check(const PoCheckArgs& a) {
  nlohmann::json all = nlohmann::json::array();
  std::map<std::string, size_t> counts;
  size_t total = 0, entries = 0, refused = 0;
  // A broken glossary is an error before any catalog is read: every finding would depend on it.
  std::optional<po::Glossary> glossary;
  if (!a.glossary.empty()) glossary = po::Glossary::read(a.glossary);
  for (const auto& f : a.files) {
    std::vector<po::Finding> findings;
    try {
      const auto catalog = data::PoCatalog::read(f);
      po::CheckOptions options;
      options.lang = a.lang;
      options.fuzzy = a.fuzzy;
      options.glossary = glossary ? &*glossary : nullptr;
      findings = po::check(catalog, options);
      for (const auto& e : catalog.entries()) entries += !e.is_header() && !e.obsolete;
    } catch (const Error& e) {
      ++refused;
      const std::string what = e.what();
      std::cerr << "attnkit: error: " << (what.rfind(f, 0) == 0 ? "" : f + ": ") << what << "\n";
      continue;
    }
    for (const auto& finding : findings) {
      ++counts[po::to_string(finding.kind)];
      ++total;
      if (a.format == "json")
        all.push_back({{"file", f},
                       {"line", finding.line},
                       {"kind", po::to_string(finding.kind)},
                       {"message", finding.message}});
      else
        std::cout << f << ":" << finding.line << ": " << po::to_string(finding.kind) << ": "
                  << finding.message << "\n";
    }
  }
  if (a.format == "json") std::cout << all.dump(2) << "\n";
  auto counted = [](size_t n, const char* one, const char* many) {
    return std::to_string(n) + " " + (n == 1 ? one : many);
  };
  std::cerr << "po check: " << counted(total, "finding", "findings") << " in "
            << counted(a.files.size(), "catalog", "catalogs") << " ("
            << counted(entries, "entry", "entries") << ")";
  for (const auto& [kind, n] : counts)
    std::cerr << (kind == counts.begin()->first ? ": " : ", ") << n << " " << kind;
  if (refused) std::cerr << "; " << counted(refused, "catalog", "catalogs") << " not read";
  std::cerr << "\n";
  return refused ? 2 : total ? 1 : 0;
}

}  // namespace

Command add_po_command(CLI::App& parent) {
  auto* app = parent.add_subcommand("po", "Pre-translate gettext catalogs (.po / .pot) for review");
  app->require_subcommand(1);

  auto* t = app->add_subcommand(
      "translate",
      "Fill a catalog's untranslated entries: exact matches from translation memory, the rest by "
      "the model, marked fuzzy; everything else passes through byte for byte");
  auto a = std::make_shared<PoTranslateArgs>();
  t->add_option("input", a->input, "The catalog (.po or .pot)")
      ->required()
      ->check(CLI::ExistingFile);
  t->add_option("--model", a->model, "Model directory from attnkit train")->required();
  checks::add_compute_type(t, a->compute_type);
  t->add_option("--out", a->out, "The pre-translated catalog (may be the input)")->required();
  t->add_option("--lang", a->lang, "Target language (default: the header's Language)");
  t->add_option("--compendium", a->compendia, "Translated catalogs to reuse exact matches from")
      ->check(CLI::ExistingFile);
  t->add_flag("--no-memory", a->no_memory, "Do not reuse translation memory (compendia, corpus)");
  t->add_option("--fuzzy-threshold", a->options.fuzzy_threshold,
                "Reuse the translation of a similar message from the memory when its similarity "
                "(0-100, as translate-toolkit and Poedit score it) is at least this; 0: exact "
                "matches only")
      ->check(CLI::Range(0, 100))
      ->capture_default_str();
  t->add_flag(
      "--refresh-fuzzy", a->options.refresh_fuzzy,
      "Fuzzy entries whose msgid changed (msgmerge's \"#| msgid\"): carry the translation "
      "across a cosmetic change (whitespace, trailing punctuation, placeholders renumbered, "
      "the accelerator) and clear the fuzzy mark; give the others a new suggestion, their "
      "old translation kept in a comment");
  t->add_option("--glossary", a->glossary,
                "A glossary (TSV, or CSV as Weblate and Poedit export it): each term's agreed "
                "translation goes into the model's suggestions")
      ->check(CLI::ExistingFile);
  t->add_option("--min-confidence", a->options.min_confidence,
                "Leave untranslated a model suggestion whose confidence (0-1, from the model's "
                "confidence.json: attnkit calibrate) is under this")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  t->add_flag("--no-protect", a->no_protect,
              "Give the model the raw lines (placeholders, markup, accelerators unprotected)");
  t->add_option("--beam", a->options.search.beam_size, "Beam size (1: greedy)")
      ->check(checks::at_least(1))
      ->capture_default_str();
  checks::add_search_penalties(t, a->options.search);
  t->add_option("--batch-size", a->options.batch_size)
      ->check(checks::at_least(1))
      ->capture_default_str();
  t->add_flag("--quiet", a->quiet, "No progress or summary on stderr");

  auto* s = app->add_subcommand(
      "stats", "Translated / fuzzy / untranslated counts, what attnkit filled, what survived");
  auto files = std::make_shared<std::vector<std::string>>();
  auto format = std::make_shared<std::string>("text");
  s->add_option("files", *files, "Catalogs")->required()->check(CLI::ExistingFile);
  s->add_option("--format", *format, "text | json")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();

  auto* c = app->add_subcommand(
      "check",
      "What a reviewer looks for in translated entries, human or machine: placeholders, markup, "
      "accelerators, identical or untranslated text, repeated words, trailing punctuation and "
      "whitespace, plural forms without their number; exit 1 on any finding");
  auto ca = std::make_shared<PoCheckArgs>();
  c->add_option("files", ca->files, "Catalogs")->required()->check(CLI::ExistingFile);
  c->add_option("--lang", ca->lang, "The catalogs' language (default: each header's Language)");
  c->add_flag("--fuzzy", ca->fuzzy, "Check fuzzy entries too");
  c->add_option("--glossary", ca->glossary,
                "Terms and their agreed translations (two-column TSV, or CSV as Weblate and "
                "Poedit export them): each entry whose source has a term and whose translation "
                "lacks its target is a finding")
      ->check(CLI::ExistingFile);
  c->add_option("--format", ca->format, "text | json")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();

  return {app,
          [a, t, s, files, format, ca] {
            if (t->parsed()) return translate(*a);
            if (s->parsed()) return stats(*files, *format);
            return check(*ca);
          },
          ThreadPolicy::Blas};
}

}  // namespace attnkit::cli
