// `attnkit corpus ...`: build, clean, split and describe parallel corpora.

#include <filesystem>
#include <iostream>
#include <map>
#include <memory>

#include "attnkit/core/error.h"
#include "attnkit/core/files.h"
#include "attnkit/data/corpus.h"
#include "attnkit/data/gettext.h"
#include "attnkit/data/synthetic.h"
#include "attnkit/data/tokenizer.h"
#include "attnkit/io/pt_file.h"
#include "attnkit/po/protect.h"
#include "checks.h"
#include "commands.h"
#include "corpus_commands.h"

namespace attnkit::cli {
namespace fs = std::filesystem;
namespace {

struct CorpusArgs {
  // gettext
  std::string lang = "zh_CN";
  std::vector<std::string> roots;
  bool no_system = false, protected_form = false;
  // prepare / stats
  std::string input, out, out_dir;
  bool reverse = false, strict = false;
  double valid = 0.05, test = 0.05;
  size_t max_len = 50;
  std::string source_tokenizer = "en", target_tokenizer = "zh";
  uint64_t seed = 1;
  // synthetic
  std::string task = "copy";
  size_t count = 2000, min_len = 3, max_len_synthetic = 8, symbols = 10;
  // spm
  std::string side = "source";
  int vocab_size = 2000;
};

void print_report(const data::ReadReport& r) {
  std::cout << r.lines << " lines: " << r.pairs << " pairs, " << r.blank << " blank, " << r.skipped
            << " malformed (skipped)\n";
  for (const auto& p : r.problems) std::cerr << "  " << p << "\n";
  if (r.skipped > r.problems.size())
    std::cerr << "  ... and " << r.skipped - r.problems.size() << " more\n";
}

void print_stats(const data::CorpusStats& s) {
  std::cout << s.pairs << " pairs; source " << s.source.tokens << " tokens (max "
            << s.source.max_len << "), target " << s.target.tokens << " tokens (max "
            << s.target.max_len << ")\n"
            << "length  source  target\n";
  std::map<size_t, std::pair<size_t, size_t>> rows;
  for (const auto& [b, c] : s.source.length_histogram) rows[b].first = c;
  for (const auto& [b, c] : s.target.length_histogram) rows[b].second = c;
  for (const auto& [b, c] : rows)
    std::printf("%3zu-%-3zu %7zu %7zu\n", b, b + 4, c.first, c.second);
}

int run_gettext(const CorpusArgs& a) {
  std::vector<std::string> roots = a.roots;
  if (!a.no_system) roots.insert(roots.begin(), "/usr/share/locale");
  const auto catalogs = data::find_catalogs(a.lang, roots);
  data::GettextReport report;
  std::vector<data::Pair> pairs;
  for (const auto& path : catalogs) {
    try {
      const bool po = fs::path(path).extension() == ".po";
      auto entries = po ? data::read_po(path) : data::read_mo(path);
      auto got = data::pairs_from_catalog(entries, report);
      pairs.insert(pairs.end(), got.begin(), got.end());
      ++report.catalogs;
    } catch (const Error& e) {
      ++report.unreadable;
      std::cerr << "  skipped: " << e.what() << "\n";
    }
  }
  // What po::protect guards, pair by pair: the pairs that carry each kind, and how many went
  // into the protected form (--protected).
  std::map<po::SpanKind, size_t> carrying;
  size_t protected_pairs = 0;
  for (auto& pair : pairs) {
    std::vector<po::SpanKind> kinds;
    po::spans(pair.source, &kinds);
    std::sort(kinds.begin(), kinds.end());
    kinds.erase(std::unique(kinds.begin(), kinds.end()), kinds.end());
    for (auto k : kinds) ++carrying[k];
    if (!a.protected_form) continue;
    if (auto masked = po::protect_pair(pair.source, pair.target)) {
      protected_pairs += masked->first != pair.source || masked->second != pair.target;
      pair = {masked->first, masked->second};
    }
  }
  const size_t duplicates = data::dedup(pairs);
  if (a.out.empty()) throw Error("corpus gettext: --out is required");
  data::write_tsv(a.out, pairs);
  std::cout << "read " << report.catalogs << " catalogs for " << a.lang << " (" << report.entries
            << " messages)\n"
            << "  skipped: " << report.untranslated << " untranslated, " << report.fuzzy
            << " fuzzy, " << report.placeholder_mismatch << " with mismatched placeholders, "
            << report.identical << " identical to the English, " << duplicates << " duplicates, "
            << report.unreadable << " unreadable\n"
            << "  kept: " << report.plural << " plural entries (singular form), " << report.context
            << " with a context, " << report.mnemonics << " with an accelerator (removed)\n"
            << "  carrying:";
  for (const auto& [kind, n] : carrying) std::cout << " " << n << " " << po::to_string(kind);
  if (carrying.empty()) std::cout << " no placeholders, markup, paths or options";
  std::cout << (a.protected_form ? "; in protected form: " + std::to_string(protected_pairs)
                                 : std::string())
            << "\n"
            << "wrote " << pairs.size() << " English -> " << a.lang << " pairs to " << a.out
            << "\n";
  return pairs.empty() ? 2 : 0;
}

// The input TSV with its read report printed, and token counters for both sides.
struct Input {
  std::vector<data::Pair> pairs;
  std::unique_ptr<data::Tokenizer> source, target;
  size_t count_source(const std::string& s) const { return source->tokenize(s).size(); }
  size_t count_target(const std::string& s) const { return target->tokenize(s).size(); }
};

Input read_input(const CorpusArgs& a) {
  data::TsvOptions options;
  options.reverse = a.reverse;
  options.strict = a.strict;
  data::ReadReport report;
  Input in{data::read_tsv(a.input, options, &report), data::make_tokenizer(a.source_tokenizer),
           data::make_tokenizer(a.target_tokenizer)};
  print_report(report);
  return in;
}

int run_prepare(const CorpusArgs& a) {
  auto in = read_input(a);
  auto& pairs = in.pairs;
  auto count_src = [&](const std::string& s) { return in.count_source(s); };
  auto count_tgt = [&](const std::string& s) { return in.count_target(s); };
  const size_t duplicates = data::dedup(pairs);
  const size_t too_long = data::filter_length(pairs, a.max_len, count_src, count_tgt);
  std::cout << "removed " << duplicates << " duplicates and " << too_long << " pairs longer than "
            << a.max_len << " tokens\n";
  auto split = data::split(pairs, a.valid, a.test, a.seed);
  if (a.out_dir.empty()) throw Error("corpus prepare: --out-dir is required");
  fs::create_directories(a.out_dir);
  data::write_tsv((fs::path(a.out_dir) / "train.tsv").string(), split.train);
  data::write_tsv((fs::path(a.out_dir) / "valid.tsv").string(), split.valid);
  data::write_tsv((fs::path(a.out_dir) / "test.tsv").string(), split.test);
  std::cout << "train " << split.train.size() << ", valid " << split.valid.size() << ", test "
            << split.test.size() << " pairs in " << a.out_dir << "\n";
  print_stats(data::stats(split.train, count_src, count_tgt));
  return 0;
}

int run_stats(const CorpusArgs& a) {
  auto in = read_input(a);
  print_stats(data::stats(
      in.pairs, [&](const std::string& s) { return in.count_source(s); },
      [&](const std::string& s) { return in.count_target(s); }));
  return 0;
}

// Space-joined tokens on both sides, for tools that must see exactly attnkit's tokenisation.
int run_tokenize(const CorpusArgs& a) {
  data::TsvOptions options;
  options.reverse = a.reverse;
  options.strict = a.strict;
  auto pairs = data::read_tsv(a.input, options);
  auto src_tok = data::make_tokenizer(a.source_tokenizer),
       tgt_tok = data::make_tokenizer(a.target_tokenizer);
  auto join = [](const std::vector<std::string>& tokens) {
    std::string out;
    for (const auto& t : tokens) out += (out.empty() ? "" : " ") + t;
    return out;
  };
  std::string text;
  for (const auto& p : pairs)
    text += join(src_tok->tokenize(p.source)) + "\t" + join(tgt_tok->tokenize(p.target)) + "\n";
  if (a.out.empty()) throw Error("corpus tokenize: --out is required");
  write_file_atomic(a.out, text);
  std::cout << "wrote " << pairs.size() << " tokenised pairs to " << a.out << "\n";
  return 0;
}

int run_synthetic(const CorpusArgs& a) {
  if (a.out.empty()) throw Error("corpus synthetic: --out is required");
  auto examples =
      data::synthetic_task(a.task, a.count, a.min_len, a.max_len_synthetic, a.symbols, a.seed);
  std::string text;
  for (const auto& e : examples)
    text +=
        e.pair.source + "\t" + e.pair.target + "\t" + data::format_alignment(e.alignment) + "\n";
  write_file_atomic(a.out, text);
  std::cout << "wrote " << examples.size() << " " << a.task << " pairs with gold alignments to "
            << a.out << "\n";
  return 0;
}

int run_spm(const CorpusArgs& a) {
  data::TsvOptions options;
  options.reverse = a.reverse;
  auto pairs = data::read_tsv(a.input, options);
  std::vector<std::string> sentences;
  for (const auto& p : pairs) sentences.push_back(a.side == "target" ? p.target : p.source);
  if (a.out.empty()) throw Error("corpus spm: --out PREFIX is required");
  data::train_sentencepiece(sentences, a.out, a.vocab_size);
  std::cout << "wrote " << a.out << ".model and " << a.out << ".vocab; use --" << a.side
            << "-tokenizer spm:" << a.out << ".model\n";
  return 0;
}

}  // namespace

Command add_corpus_command(CLI::App& parent) {
  auto* app = parent.add_subcommand("corpus", "Build, clean, split and describe parallel corpora");
  app->require_subcommand(1);
  auto a = std::make_shared<CorpusArgs>();
  auto tokenizers = [&](CLI::App* c) {
    c->add_option("--source-tokenizer", a->source_tokenizer,
                  "en | en-lower | en-norm | zh | spm:<model>")
        ->capture_default_str();
    c->add_option("--target-tokenizer", a->target_tokenizer,
                  "en | en-lower | en-norm | zh | spm:<model>")
        ->capture_default_str();
  };
  auto* gettext =
      app->add_subcommand("gettext", "English -> LANG pairs from the gettext catalogs (.mo, .po)");
  gettext->add_option("--lang", a->lang, "Catalog language, e.g. zh_CN, fr, de")
      ->capture_default_str();
  gettext->add_option("--root", a->roots, "Also read catalogs under DIR (repeatable)");
  gettext->add_flag("--no-system", a->no_system, "Do not read /usr/share/locale");
  gettext->add_option("--out", a->out, "Output TSV")->required();
  gettext->add_flag("--protected", a->protected_form,
                    "Pairs in the form po translate gives the model: spans masked as %s, the "
                    "wrapping markup and a trailing colon or ellipsis set aside (docs/po.md)");

  auto* prepare =
      app->add_subcommand("prepare", "Dedup, length-filter and split a TSV into train/valid/test");
  prepare->add_option("input", a->input, "source<TAB>target file")->required();
  prepare->add_option("--out-dir", a->out_dir, "Where train.tsv, valid.tsv and test.tsv go")
      ->required();
  prepare->add_flag("--reverse", a->reverse, "Swap the columns (translate target -> source)");
  prepare->add_flag("--strict", a->strict, "Stop at the first malformed line");
  prepare->add_option("--valid", a->valid, "Validation fraction")
      ->check(checks::fraction())
      ->capture_default_str();
  prepare->add_option("--test", a->test, "Test fraction")
      ->check(checks::fraction())
      ->capture_default_str();
  prepare->add_option("--max-len", a->max_len, "Longest side in tokens")
      ->check(checks::at_least(1))
      ->capture_default_str();
  prepare->add_option("--seed", a->seed, "Split seed")->capture_default_str();
  tokenizers(prepare);

  auto* stats = app->add_subcommand("stats", "Pairs, tokens and the length histogram of a TSV");
  stats->add_option("input", a->input)->required();
  stats->add_flag("--reverse", a->reverse);
  stats->add_flag("--strict", a->strict);
  tokenizers(stats);

  auto* tokenize =
      app->add_subcommand("tokenize", "Write a TSV's tokens, space-separated (for other tools)");
  tokenize->add_option("input", a->input)->required();
  tokenize->add_option("--out", a->out)->required();
  tokenize->add_flag("--reverse", a->reverse);
  tokenize->add_flag("--strict", a->strict);
  tokenizers(tokenize);

  auto* synthetic =
      app->add_subcommand("synthetic", "Copy/reverse/permute tasks with gold alignments");
  synthetic->add_option("--task", a->task, "copy | reverse | permute")->capture_default_str();
  synthetic->add_option("--count", a->count)->capture_default_str();
  synthetic->add_option("--min-len", a->min_len)->capture_default_str();
  synthetic->add_option("--max-len", a->max_len_synthetic)->capture_default_str();
  synthetic->add_option("--symbols", a->symbols)->capture_default_str();
  synthetic->add_option("--seed", a->seed)->capture_default_str();
  synthetic->add_option("--out", a->out)->required();

  auto run_debian = std::make_shared<std::function<int()>>();
  auto* debian = add_corpus_debian_command(app, *run_debian);

  auto* spm = app->add_subcommand("spm", "Train a SentencePiece model on one side of a TSV");
  spm->add_option("input", a->input)->required();
  spm->add_option("--side", a->side, "source | target")->capture_default_str();
  spm->add_option("--vocab-size", a->vocab_size)->capture_default_str();
  spm->add_option("--out", a->out, "Model prefix")->required();
  spm->add_flag("--reverse", a->reverse);

  return {app, [=] {
            if (gettext->parsed()) return run_gettext(*a);
            if (debian->parsed()) return (*run_debian)();
            if (prepare->parsed()) return run_prepare(*a);
            if (stats->parsed()) return run_stats(*a);
            if (synthetic->parsed()) return run_synthetic(*a);
            if (tokenize->parsed()) return run_tokenize(*a);
            return run_spm(*a);
          }};
}

}  // namespace attnkit::cli
