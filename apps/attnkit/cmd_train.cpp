// `attnkit train`: the second note's Seq2Seq with attention on a parallel corpus.

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <memory>
#include <numeric>
#include <optional>
#include <sstream>
#include <thread>

#include "attnkit/core/error.h"
#include "attnkit/core/files.h"
#include "attnkit/data/corpus.h"
#include "attnkit/data/tokenizer.h"
#include "attnkit/data/vocab.h"
#include "attnkit/eval/metrics.h"
#include "attnkit/train/launcher.h"
#include "attnkit/train/trainer.h"
#include "attnkit/translate/registry.h"
#include "attnkit/translate/training.h"
#include "attnkit/translate/translator.h"
#include "checks.h"
#include "commands.h"
#include "format.h"
#include "progress.h"

namespace attnkit::cli {
namespace fs = std::filesystem;
namespace {

struct TrainArgs {
  std::string train, valid;
  std::string source_tokenizer = "en-lower", target_tokenizer = "zh";
  std::string source_lang, target_lang;
  int spm_vocab = 4000;
  size_t spm_sample = 300000;  // sentences a SentencePiece model is trained on, at most
  size_t min_freq = 1, max_vocab = 0, max_len = 50;
  bool reverse = false, strict = false;
  std::string arch = "rnn";
  // 0: the architecture's default (rnn 1, transformer 3 each side).
  int64_t embed = 128, hidden = 256, layers = 0, self_attention_layers = 0, heads = 4, window = 4;
  int64_t encoder_layers = 0, decoder_layers = 0, d_model = 256, ffn = 1024;
  double attention_dropout = 0.0, ffn_dropout = 0.1;
  std::string activation = "relu";
  bool post_norm = false, untied_output = false, share_vocab = false;
  bool unidirectional = false, no_attention = false, no_input_feeding = false;
  double dropout = 0.1, temperature = 1.0;
  std::string score = "bahdanau", weighting = "soft", hard_gradient = "straight-through";
  train::TrainOptions options;
  int64_t warmup_steps = -1;  // -1: the architecture's default (rnn 0, transformer 1000)
  bool quiet = false;
  int nproc = 1;
  double dist_timeout = 120;
  int threads = 0;  // the global --threads, for the workers --nproc spawns
};

// `--nproc N`: N copies of this command as ranks 0..N-1 on 127.0.0.1, as torchrun would start
// them, each with its share of the cores. If one fails, the others are stopped.
int spawn_workers(const TrainArgs& a, const std::vector<std::string>& command_line) {
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  const int threads = a.threads > 0 ? a.threads : std::max(1, static_cast<int>(cores) / a.nproc);
  const auto launched = train::launch_local_workers(a.nproc, threads, command_line);
  if (launched.failed_rank < 0) return 0;
  std::cerr << "train: worker rank " << launched.failed_rank << " failed (exit code "
            << launched.exit_code << "); the other workers were stopped\n";
  return 1;
}

// At most `limit` sentences of one side (or both), a fixed sample: a corpus of a million pairs
// teaches SentencePiece no more than a few hundred thousand, at several times the time.
std::vector<std::string> spm_sentences(const std::vector<data::Pair>& pairs, bool source,
                                       bool target, size_t limit) {
  std::vector<size_t> order(pairs.size());
  std::iota(order.begin(), order.end(), 0);
  if (order.size() > limit) {
    data::deterministic_shuffle(order, /*seed=*/17);
    order.resize(limit);
    std::sort(order.begin(), order.end());
  }
  std::vector<std::string> sentences;
  for (size_t i : order) {
    if (source) sentences.push_back(pairs[i].source);
    if (target) sentences.push_back(pairs[i].target);
  }
  return sentences;
}

// "spm" means: train a SentencePiece model on this side of the training data (on both, into one
// model, with --share-vocab when both sides ask for it).
std::string resolve_tokenizer(const std::string& spec, const std::vector<data::Pair>& pairs,
                              bool source, const TrainArgs& a) {
  const bool shared = a.share_vocab && a.source_tokenizer == "spm" && a.target_tokenizer == "spm";
  const std::string name = shared ? "shared" : source ? "source" : "target";
  if (spec == "spm") {
    const auto prefix = (fs::path(a.options.model_dir) / (name + ".spm")).string();
    if (!shared || source)  // the shared model is trained once, for the source side
      data::train_sentencepiece(
          spm_sentences(pairs, source || shared, !source || shared, a.spm_sample), prefix,
          a.spm_vocab);
    return "spm:" + name + ".spm.model";
  }
  if (spec.rfind("spm:", 0) == 0) {  // keep the model inside the model directory
    const fs::path model = spec.substr(4);
    const auto dest = fs::path(a.options.model_dir) / (name + ".spm.model");
    if (fs::absolute(model) != fs::absolute(dest))
      fs::copy_file(model, dest, fs::copy_options::overwrite_existing);
    return "spm:" + name + ".spm.model";
  }
  data::make_tokenizer(spec);  // validates the name
  return spec;
}

// Both sides of a corpus, tokenized once (a helper-process tokenizer in batches).
struct Tokenized {
  std::vector<std::vector<std::string>> source, target;
};

Tokenized tokenize_pairs(const std::vector<data::Pair>& pairs, const data::Tokenizer& st,
                         const data::Tokenizer& tt) {
  std::vector<std::string> sources, targets;
  sources.reserve(pairs.size());
  targets.reserve(pairs.size());
  for (const auto& p : pairs) {
    sources.push_back(p.source);
    targets.push_back(p.target);
  }
  return {st.tokenize_all(sources), tt.tokenize_all(targets)};
}

std::vector<train::Example> encode(const Tokenized& tokens, const data::Vocab& sv,
                                   const data::Vocab& tv, size_t max_len, size_t* dropped) {
  std::vector<train::Example> out;
  for (size_t i = 0; i < tokens.source.size(); ++i) {
    auto s = sv.encode(tokens.source[i]), t = tv.encode(tokens.target[i]);
    if (s.empty() || t.empty() || s.size() > max_len || t.size() > max_len) {
      if (dropped) ++*dropped;
      continue;
    }
    out.push_back({std::move(s), std::move(t)});
  }
  return out;
}

// A new run never writes into another model's directory: its config.json and vocabularies
// would be replaced before anything is validated, leaving the weights with the wrong ones.
void refuse_to_overwrite(const train::TrainOptions& o) {
  if (o.resume) return;
  for (const char* file : {"config.json", "model.pt", "checkpoint.pt"}) {
    const auto path = fs::path(o.model_dir) / file;
    if (fs::exists(path))
      throw Error(o.model_dir + " already holds a model (" + path.string() +
                  "); continue it with --resume, or train into a new --model-dir");
  }
}

// The corpus's malformed lines, as warnings (the main rank only).
void warn_about(const data::ReadReport& report) {
  for (const auto& p : report.problems) std::cerr << "warning: " << p << " (skipped)\n";
  if (report.skipped > report.problems.size())
    std::cerr << "warning: " << report.skipped - report.problems.size()
              << " more malformed lines skipped\n";
}

struct Corpora {
  std::vector<data::Pair> train, valid;
};

Corpora read_corpora(const TrainArgs& a, bool main_rank) {
  data::TsvOptions tsv;
  tsv.reverse = a.reverse;
  tsv.strict = a.strict;
  data::ReadReport train_report, valid_report;
  Corpora c;
  c.train = data::read_tsv(a.train, tsv, &train_report);
  if (!a.valid.empty()) c.valid = data::read_tsv(a.valid, tsv, &valid_report);
  if (main_rank) {
    warn_about(train_report);
    warn_about(valid_report);
  }
  return c;
}

transformer::TransformerOptions transformer_options(const TrainArgs& a, int64_t source_vocab,
                                                    int64_t target_vocab) {
  const int64_t layers = a.layers > 0 ? a.layers : 3;
  return transformer::TransformerOptions(source_vocab, target_vocab)
      .d_model(a.d_model)
      .heads(a.heads)
      .encoder_layers(a.encoder_layers > 0 ? a.encoder_layers : layers)
      .decoder_layers(a.decoder_layers > 0 ? a.decoder_layers : layers)
      .ffn(a.ffn)
      .dropout(a.dropout)
      .attention_dropout(a.attention_dropout)
      .ffn_dropout(a.ffn_dropout)
      .activation(transformer::parse_activation(a.activation))
      .norm_first(!a.post_norm)
      .tie_output(!a.untied_output)
      .share_embeddings(a.share_vocab);
}

rnn::RnnOptions model_options(const TrainArgs& a, int64_t source_vocab, int64_t target_vocab) {
  return rnn::RnnOptions(source_vocab, target_vocab)
      .embed_size(a.embed)
      .hidden_size(a.hidden)
      .layers(a.layers > 0 ? a.layers : 1)
      .bidirectional(!a.unidirectional)
      .dropout(a.dropout)
      .attention(!a.no_attention)
      .score(parse_score_kind(a.score))
      .weighting(parse_weighting_kind(a.weighting))
      .hard_gradient(parse_hard_gradient(a.hard_gradient))
      .temperature(a.temperature)
      .window(a.window)
      .input_feeding(!a.no_input_feeding)
      .self_attention_layers(a.self_attention_layers)
      .self_attention_heads(a.heads);
}

// The model directory's config and vocabularies, with the tokenizers they name, and the
// training pairs' tokens.
struct Prepared {
  translate::ModelConfig config;
  data::Vocab source_vocab, target_vocab;
  std::unique_ptr<data::Tokenizer> source_tokenizer, target_tokenizer;
  Tokenized train_tokens;
};

// A new run writes config.json and the vocabularies (rank 0 first: the other ranks then read what
// it wrote when they share its filesystem, or prepare the same deterministic vocabularies on
// their own disk); a resumed run reads them.
Prepared prepare_model_dir(const TrainArgs& a, const std::vector<data::Pair>& train_pairs,
                           train::Distributed* dist) {
  const auto& dir = a.options.model_dir;
  const bool main_rank = !dist || dist->is_main();
  Prepared p;
  if (dist && !main_rank) dist->barrier();
  const bool prepare_here =
      !a.options.resume && (main_rank || !fs::exists(fs::path(dir) / "config.json"));
  if (!prepare_here) {
    p.config = translate::load_config(dir);
    p.source_vocab = data::Vocab::load((fs::path(dir) / "source.vocab").string());
    p.target_vocab = data::Vocab::load((fs::path(dir) / "target.vocab").string());
  } else {
    p.config.source_tokenizer = resolve_tokenizer(a.source_tokenizer, train_pairs, true, a);
    p.config.target_tokenizer = resolve_tokenizer(a.target_tokenizer, train_pairs, false, a);
  }
  p.config.dir = dir;
  p.source_tokenizer = data::make_tokenizer(p.config.source_tokenizer, dir);
  p.target_tokenizer = data::make_tokenizer(p.config.target_tokenizer, dir);
  p.train_tokens = tokenize_pairs(train_pairs, *p.source_tokenizer, *p.target_tokenizer);
  if (prepare_here) {
    const auto& src = p.train_tokens.source;
    const auto& tgt = p.train_tokens.target;
    if (a.share_vocab) {  // one vocabulary for both sides, for shared embeddings
      auto both = src;
      both.insert(both.end(), tgt.begin(), tgt.end());
      p.source_vocab = p.target_vocab = data::Vocab::build(both, a.min_freq, a.max_vocab);
    } else {
      p.source_vocab = data::Vocab::build(src, a.min_freq, a.max_vocab);
      p.target_vocab = data::Vocab::build(tgt, a.min_freq, a.max_vocab);
    }
    p.config.arch = translate::parse_arch(a.arch);
    p.config.source_lang = a.source_lang;
    p.config.target_lang = a.target_lang;
    p.config.train_corpus = fs::absolute(a.train).lexically_normal().string();
    // Both architectures' options: config.json keeps the one its arch names (translate/registry.h).
    p.config.transformer = transformer_options(a, p.source_vocab.size(), p.target_vocab.size());
    p.config.model = model_options(a, p.source_vocab.size(), p.target_vocab.size());
    p.source_vocab.save((fs::path(dir) / "source.vocab").string());
    p.target_vocab.save((fs::path(dir) / "target.vocab").string());
    translate::save_config(dir, p.config);
  }
  if (dist && main_rank) dist->barrier();
  return p;
}

train::TrainData encode_data(const Corpora& c, const Prepared& p, size_t max_len, size_t* dropped) {
  train::TrainData data;
  data.train = encode(p.train_tokens, p.source_vocab, p.target_vocab, max_len, dropped);
  data.valid = encode(tokenize_pairs(c.valid, *p.source_tokenizer, *p.target_tokenizer),
                      p.source_vocab, p.target_vocab, max_len, nullptr);
  for (const auto& pair : c.valid) {
    data.valid_sources.push_back(pair.source);
    data.valid_references.push_back(pair.target);
  }
  return data;
}

void print_summary(const TrainArgs& a, const Prepared& p, const train::TrainData& data,
                   size_t dropped, const train::Distributed* dist) {
  const std::string model = translate::describe(p.config);
  std::cerr << "train: " << data.train.size() << " pairs (" << dropped << " dropped: empty or over "
            << a.max_len << " tokens), valid: " << data.valid.size() << ", vocab "
            << p.source_vocab.size() << " -> " << p.target_vocab.size() << ", " << model
            << (a.options.accumulate > 1
                    ? ", " + std::to_string(a.options.accumulate) + " batches per step"
                    : std::string())
            << (a.options.resume ? ", resuming" : "")
            << (dist ? ", " + std::to_string(dist->world_size()) + " ranks" : std::string())
            << "\n";
}

// Builds the model config.json describes and trains it.
train::TrainResult train_architecture(const Prepared& p, const train::TrainData& data,
                                      const train::TrainOptions& o) {
  std::shared_ptr<decoding::TranslationModel> model = translate::build_model(p.config);
  return translate::train_model(p.config, model, p.source_vocab, p.target_vocab, data, o);
}

int run(TrainArgs a, const std::vector<std::string>& command_line) {
  auto& o = a.options;
  if (o.model_dir.empty()) throw Error("train: --model-dir is required");
  auto dist_options = train::distributed_from_env();
  if (a.nproc > 1 && dist_options.world_size == 1) {
    fs::create_directories(o.model_dir);
    DirectoryLock lock(o.model_dir, "training");
    refuse_to_overwrite(o);
    return spawn_workers(a, command_line);
  }
  // One run per directory: two would write each other's checkpoints and logs. The ranks that
  // --nproc starts share their launcher's lock; of other ranks, rank 0 holds it (the others
  // may share its filesystem).
  fs::create_directories(o.model_dir);
  std::optional<DirectoryLock> lock;
  if (!std::getenv("ATTNKIT_MODEL_DIR_LOCKED") && dist_options.rank == 0)
    lock.emplace(o.model_dir, "training");
  // Before the ranks meet: once they have, rank 0 may write config.json before another looks.
  refuse_to_overwrite(o);
  std::unique_ptr<train::Distributed> dist;
  if (dist_options.world_size > 1) {
    dist_options.timeout_s = a.dist_timeout;
    dist = std::make_unique<train::Distributed>(dist_options);
    o.distributed = dist.get();
  }
  const bool main_rank = !dist || dist->is_main();
  // A run killed before its first checkpoint left config.json and the vocabularies, and nothing
  // to resume from: --resume starts from the beginning with them (the same run, as it was asked).
  const auto dir = fs::path(o.model_dir);
  const bool start_over = o.resume && !fs::exists(dir / "checkpoint.pt") &&
                          !fs::exists(dir / "model.pt") && fs::exists(dir / "config.json");
  if (start_over && main_rank)
    std::cerr << "note: " << o.model_dir
              << " has no checkpoint yet (the run stopped before its first): starting from the "
                 "beginning with its config.json and vocabularies\n";

  const auto corpora = read_corpora(a, main_rank);
  fs::create_directories(o.model_dir);
  auto prepared = prepare_model_dir(a, corpora.train, dist.get());
  size_t dropped = 0;
  const auto data = encode_data(corpora, prepared, a.max_len, &dropped);
  prepared.train_tokens = {};  // the ids are what training reads
  o.bleu_tokenize =
      eval::bleu_tokenizer_for(prepared.config.target_lang, prepared.config.target_tokenizer);
  // The architecture's default schedule; from config.json, so that a resumed run keeps it.
  o.warmup_steps =
      a.warmup_steps >= 0 ? a.warmup_steps : translate::default_warmup_steps(prepared.config.arch);
  if (main_rank) print_summary(a, prepared, data, dropped, dist.get());

  TrainProgress progress;
  if (!a.quiet && main_rank) o.on_event = std::ref(progress);
  if (start_over) o.resume = false;
  at::manual_seed(o.seed);  // initialisation, so the same seed gives the same model
  const auto result = train_architecture(prepared, data, o);
  progress.finish();
  if (!main_rank) return 0;
  std::ostringstream paused;  // one decimal, without changing std::cout's format
  paused << std::fixed << std::setprecision(1) << result.paused_seconds;
  std::cout << "stopped: " << train::to_string(result.stopped_because) << " after " << result.steps
            << " steps (" << result.epochs_done << " epochs, "
            << static_cast<int>(result.train_seconds) << " s, " << paused.str()
            << " s of it validating and checkpointing; "
            << static_cast<int>(result.target_tokens_per_second) << " target tokens/s training)\n"
            << "best valid BLEU " << result.best_valid_bleu << ", model in " << o.model_dir << "\n";
  return 0;
}

// The recipes for a corpus of Debian's archive (a few hundred thousand to a million pairs) on
// a 2-core machine. Subwords on both sides (SentencePiece, 8,000 pieces each: the output layer
// is most of a step's work, and a vocabulary of words leaves the held-out packages' new words
// unknown), validation every 2,000 steps (an epoch is 20 to 60 minutes), the plateau's decay
// after two rounds without a better BLEU, a stop after six; no bound on epochs, so that
// --time-limit or the early stop ends the run (ten epochs of a small corpus take minutes).
const std::vector<std::pair<std::string, std::vector<std::pair<std::string, std::string>>>>&
presets() {
  static const std::vector<std::pair<std::string, std::vector<std::pair<std::string, std::string>>>>
      kPresets = {
          {"archive-rnn",
           {{"--arch", "rnn"},
            {"--epochs", "1000"},
            {"--source-tokenizer", "spm"},
            {"--target-tokenizer", "spm"},
            {"--spm-vocab", "8000"},
            {"--embed", "256"},
            {"--hidden", "256"},
            {"--batch-size", "64"},
            {"--valid-every", "2000"},
            {"--lr-patience", "2"},
            {"--early-stop", "6"},
            {"--max-len", "50"}}},
          {"archive-transformer",
           {{"--arch", "transformer"},
            {"--epochs", "1000"},
            {"--source-tokenizer", "spm"},
            {"--target-tokenizer", "spm"},
            {"--spm-vocab", "8000"},
            {"--batch-tokens", "4096"},
            {"--warmup-steps", "2000"},
            {"--valid-every", "2000"},
            {"--lr-patience", "2"},
            {"--early-stop", "6"},
            {"--max-len", "50"}}},
      };
  return kPresets;
}

std::vector<std::string> preset_names() {
  std::vector<std::string> names;
  for (const auto& [name, options] : presets()) names.push_back(name);
  return names;
}

// Gives each of the preset's options its value, unless the command line gave it one.
void apply_preset(CLI::App& app, const std::string& name) {
  for (const auto& [preset, options] : presets()) {
    if (preset != name) continue;
    for (const auto& [flag, value] : options) {
      CLI::Option* option = app.get_option(flag);
      if (option->count() > 0) continue;
      option->add_result(value);
      option->run_callback();
    }
  }
}

// The corpus, the tokenizers and the vocabularies.
void add_data_options(CLI::App* app, TrainArgs* a) {
  auto& o = a->options;
  app->add_option("--train", a->train, "Training pairs, source<TAB>target")->required();
  app->add_option("--valid", a->valid, "Validation pairs (for loss, BLEU, early stopping)");
  app->add_option("--model-dir", o.model_dir, "Where the model goes")->required();
  app->add_option("--source-tokenizer", a->source_tokenizer,
                  "en | en-lower | en-norm | zh | spm | spm:<model>")
      ->capture_default_str();
  app->add_option("--target-tokenizer", a->target_tokenizer,
                  "en | en-lower | en-norm | zh | spm | spm:<model>")
      ->capture_default_str();
  app->add_option("--source-lang", a->source_lang,
                  "The source language (e.g. en), recorded in config.json");
  app->add_option("--target-lang", a->target_lang,
                  "The target language (e.g. zh_CN): `po translate` refuses catalogs in another");
  app->add_option("--spm-vocab", a->spm_vocab, "SentencePiece vocabulary size for 'spm'")
      ->check(checks::at_least(8))
      ->capture_default_str();
  app->add_option("--spm-sample", a->spm_sample,
                  "Train SentencePiece on at most this many sentences (a fixed sample of the "
                  "training data)")
      ->check(checks::at_least(1))
      ->capture_default_str();
  app->add_option("--min-freq", a->min_freq, "Minimum token count for the vocabularies")
      ->check(checks::at_least(1))
      ->capture_default_str();
  app->add_option("--max-vocab", a->max_vocab, "Largest vocabulary (0: no limit)")
      ->capture_default_str();
  app->add_option("--max-len", a->max_len, "Drop pairs with a longer side (tokens)")
      ->check(checks::at_least(1))
      ->capture_default_str();
  app->add_flag("--reverse", a->reverse, "Swap the TSV columns");
  app->add_flag("--strict", a->strict, "Stop at the first malformed line");
}

// The architecture and its sizes.
void add_model_options(CLI::App* app, TrainArgs* a) {
  app->add_option("--arch", a->arch,
                  "rnn: GRU encoder-decoder with attention (the notes' Seq2Seq); transformer: "
                  "self-attention encoder and decoder")
      ->check(CLI::IsMember({"rnn", "transformer"}))
      ->capture_default_str();
  app->add_option("--embed", a->embed, "rnn: embedding size")
      ->check(checks::at_least(1))
      ->capture_default_str();
  app->add_option("--hidden", a->hidden, "rnn: GRU state size")
      ->check(checks::at_least(1))
      ->capture_default_str();
  app->add_option("--layers", a->layers,
                  "GRU layers (default 1), or Transformer layers on each side (default 3)")
      ->check(checks::at_least(1));
  app->add_option("--encoder-layers", a->encoder_layers, "transformer: encoder layers")
      ->check(checks::at_least(1));
  app->add_option("--decoder-layers", a->decoder_layers, "transformer: decoder layers")
      ->check(checks::at_least(1));
  app->add_option("--d-model", a->d_model, "transformer: model width")
      ->check(checks::at_least(2))
      ->capture_default_str();
  app->add_option("--ffn", a->ffn, "transformer: feed-forward width")
      ->check(checks::at_least(1))
      ->capture_default_str();
  app->add_option("--activation", a->activation, "transformer: feed-forward activation")
      ->check(CLI::IsMember({"relu", "gelu"}))
      ->capture_default_str();
  app->add_flag("--post-norm", a->post_norm,
                "transformer: norm(x + f(x)) as in the 2017 paper, instead of pre-norm");
  app->add_option(
         "--attention-dropout", a->attention_dropout,
         "transformer: dropout on attention weights (above 0, training leaves the fused attention "
         "kernel for the composite)")
      ->check(checks::fraction())
      ->capture_default_str();
  app->add_option("--ffn-dropout", a->ffn_dropout,
                  "transformer: dropout after the feed-forward activation")
      ->check(checks::fraction())
      ->capture_default_str();
  app->add_flag("--untied-output", a->untied_output,
                "transformer: an output layer of its own, not the target embedding");
  app->add_flag("--share-vocab", a->share_vocab,
                "transformer: one vocabulary and one embedding for both sides");
  app->add_flag("--unidirectional", a->unidirectional, "A one-direction encoder");
  app->add_option("--dropout", a->dropout)->check(checks::fraction())->capture_default_str();
  app->add_flag("--no-attention", a->no_attention,
                "The baseline: one fixed context C from the encoder");
  app->add_option("--score", a->score, choices(score_kind_names()))->capture_default_str();
  app->add_option("--weighting", a->weighting, choices(weighting_kind_names()))
      ->capture_default_str();
  app->add_option("--hard-gradient", a->hard_gradient, choices(hard_gradient_names()))
      ->capture_default_str();
  app->add_option("--temperature", a->temperature, "Gumbel temperature")
      ->check(checks::positive())
      ->capture_default_str();
  app->add_option("--window", a->window, "Local attention half-width")
      ->check(checks::non_negative())
      ->capture_default_str();
  app->add_flag("--no-input-feeding", a->no_input_feeding);
  app->add_option("--self-attention-layers", a->self_attention_layers,
                  "Multi-head self-attention layers over the encoder states")
      ->check(checks::non_negative())
      ->capture_default_str();
  app->add_option("--heads", a->heads, "Attention heads (transformer, or --self-attention-layers)")
      ->check(checks::at_least(1))
      ->capture_default_str();
}

// The training loop: its length, batches, optimizer, validation and checkpoints.
void add_loop_options(CLI::App* app, TrainArgs* a) {
  auto& o = a->options;
  app->add_option("--epochs", o.epochs)->check(checks::at_least(1))->capture_default_str();
  app->add_option("--time-limit", o.time_limit, "Stop after this many seconds (checkpointed)")
      ->check(checks::non_negative());
  app->add_option("--max-steps", o.max_steps, "Stop after this many steps (checkpointed)")
      ->check(checks::non_negative());
  app->add_option("--batch-size", o.batch_size, "Sentences per batch")
      ->check(checks::at_least(1))
      ->capture_default_str();
  app->add_option("--batch-tokens", o.batch_tokens,
                  "Batches by size instead: at most this many tokens each, padding included")
      ->check(checks::at_least(1));
  app->add_option("--accumulate", o.accumulate,
                  "Gradient accumulation: one optimizer step per this many batches, run one after "
                  "the other (the step of a batch this many times larger, at the memory of one)")
      ->check(checks::at_least(1))
      ->capture_default_str();
  app->add_option("--lanes", o.lanes,
                  "Parts of each batch trained at once, a thread each, gradients summed in order "
                  "(the result depends on the lanes, not on the threads); 0: one per thread for "
                  "the Transformer, 1 otherwise")
      ->check(checks::non_negative())
      ->capture_default_str();
  app->add_option("--warmup-steps", a->warmup_steps,
                  "Inverse-square-root schedule: the rate rises to --lr over this many steps, then "
                  "falls as 1/sqrt(step); 0: off (default: rnn 0, transformer 1000)")
      ->check(checks::non_negative());
  app->add_option("--lr", o.learning_rate)->check(checks::positive())->capture_default_str();
  app->add_option("--clip", o.clip, "Gradient-norm clipping (0: off)")
      ->check(checks::non_negative())
      ->capture_default_str();
  app->add_option("--teacher-forcing", o.teacher_forcing)
      ->check(checks::probability())
      ->capture_default_str();
  app->add_option("--label-smoothing", o.label_smoothing)
      ->check(checks::fraction())
      ->capture_default_str();
  app->add_option("--lr-decay", o.lr_decay)
      ->check(checks::range(0, 1, true))
      ->capture_default_str();
  app->add_option("--lr-patience", o.lr_patience)
      ->check(checks::non_negative())
      ->capture_default_str();
  app->add_option("--early-stop", o.early_stop,
                  "Epochs without improvement before stopping (0: never)")
      ->check(checks::non_negative())
      ->capture_default_str();
  app->add_option("--valid-every", o.valid_every,
                  "Validate every N steps instead of after each epoch (0: each epoch); "
                  "--early-stop and --lr-patience then count these rounds")
      ->check(checks::non_negative())
      ->capture_default_str();
  app->add_option("--checkpoint-every", o.checkpoint_every)
      ->check(checks::non_negative())
      ->capture_default_str();
  app->add_option("--keep-checkpoints", o.keep_checkpoints,
                  "Also keep the weights of the last N checkpoints (MODEL_DIR/checkpoints/), for "
                  "`attnkit average`; 0: none")
      ->check(checks::non_negative())
      ->capture_default_str();
  app->add_option("--valid-bleu-sentences", o.valid_bleu_sentences)
      ->check(checks::non_negative())
      ->capture_default_str();
  app->add_option("--seed", o.seed)->capture_default_str();
  app->add_flag("--resume", o.resume, "Continue from MODEL_DIR/checkpoint.pt");
  app->add_flag("--quiet", a->quiet, "No progress bar");
}

// Data-parallel ranks.
void add_rank_options(CLI::App* app, TrainArgs* a) {
  app->add_option("--nproc", a->nproc,
                  "Data-parallel workers on this machine (Gloo over 127.0.0.1); multi-machine runs "
                  "use RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT as torchrun sets them")
      ->check(checks::at_least(1))
      ->capture_default_str();
  app->add_option("--dist-timeout", a->dist_timeout,
                  "Seconds a rank waits for the others before failing")
      ->check(checks::positive())
      ->capture_default_str();
}

}  // namespace

Command add_train_command(CLI::App& parent) {
  auto* app = parent.add_subcommand(
      "train", "Train a translation model: GRU encoder-decoder with attention, or Transformer");
  auto a = std::make_shared<TrainArgs>();
  add_data_options(app, a.get());
  add_model_options(app, a.get());
  add_loop_options(app, a.get());
  add_rank_options(app, a.get());
  auto preset = std::make_shared<std::string>();
  app->add_option("--preset", *preset,
                  "Options for a corpus of Debian's archive (corpus debian) on a few cores: "
                  "archive-rnn | archive-transformer; options given on the command line win "
                  "(docs/translation.md lists what each sets)")
      ->check(CLI::IsMember(preset_names()));
  CLI::App* root = &parent;
  return {app,
          [a, root, app, preset] {
            if (!preset->empty()) apply_preset(*app, *preset);
            a->threads = root->get_option("--threads")->as<int>();
            return run(*a, command_line());
          },
          ThreadPolicy::Kernels};
}

}  // namespace attnkit::cli
