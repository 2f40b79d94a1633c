#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "attnkit/data/tokenizer.h"
#include "attnkit/data/vocab.h"
#include "attnkit/decoding/search.h"
#include "attnkit/decoding/translation_model.h"
#include "attnkit/kernels/gemm/compute_type.h"
#include "attnkit/translate/model_dir.h"

// The translator: text in, translations out, over any architecture's model
// (decoding/translation_model.h): tokenization, batches by length, the searches, <unk> copying
// by attention, and batches on several threads at once.
namespace attnkit::translate {

struct Translation {
  std::string text;
  std::vector<std::string> source_tokens, target_tokens;
  double score = 0;
  // [target tokens (+ the end-of-sentence step), source tokens]: row i is the step that chose
  // target_tokens[i]; a hypothesis that ended with <eos> has one more row, the step that chose
  // it. attention_rows() labels them.
  at::Tensor attention;
  std::vector<std::pair<std::string, double>> nbest;  // best first, including the first
  std::vector<int64_t> target_ids;  // the best hypothesis's token ids (before <unk> copying)
  // A Transformer's every attention map of the best hypothesis, per layer, each [heads, rows,
  // cols] (Translator::add_attention_maps): cross-attention [H, rows, S]; decoder
  // self-attention [H, rows, rows], whose keys are the decoder's inputs (decoder_inputs());
  // encoder self-attention [H, S, S]. `attention` is the penultimate layer's cross
  // (transformer::alignment_layer), averaged.
  std::vector<at::Tensor> cross_layers, decoder_self_layers, encoder_self_layers;
};

// A given translation scored by the model (attnkit score, decoding/force.h).
struct Scoring {
  std::vector<std::string> source_tokens, target_tokens;  // as the model's tokenizers give them
  std::vector<double> token_log_probs;  // one per target token, then the end of sentence's
  double log_prob = 0;                  // their sum
  double score = 0;                     // normalised as the search normalises (length_penalty)
  at::Tensor attention;                 // [target tokens + 1, source tokens]
  at::Tensor next_log_probs;            // [target vocabulary]: what could come after the target
};

// One of the alternatives at a position (Translator::alternatives).
struct Alternative {
  std::string token;          // the token chosen at the position
  double token_log_prob = 0;  // its log-probability there
  Translation translation;    // the prefix, the token, and the search's continuation
};

// The decoder's input tokens, one per attention row: <s>, then the target tokens before the last
// row's (the keys of the decoder self-attention maps).
std::vector<std::string> decoder_inputs(const Translation& t);

// The end-of-sentence step's label among attention_rows().
inline constexpr const char* kEosLabel = "</s>";

// The labels of t.attention's rows: the target tokens, then kEosLabel for the end-of-sentence
// step when the attention has it. Every JSON output (serve, translate --format json,
// --attention-out) gives them as "attention_rows", so that rows and tokens line up.
std::vector<std::string> attention_rows(const Translation& t);

class Translator {
 public:
  // Loads config, vocabularies, tokenizers and weights (model.pt, or checkpoint.pt's latest
  // weights when a run stopped before writing model.pt); a missing or inconsistent directory
  // (e.g. a vocabulary whose size differs from the weights') is an attnkit::Error.
  // `compute_type`, when given, replaces config.json's (an int8 directory's weights then run in
  // float32, or a float32 one's are quantized when packed).
  explicit Translator(const std::string& model_dir,
                      std::optional<kernels::ComputeType> compute_type = std::nullopt);
  // A model in memory (shared: training validates with the weights it is training). Its compute
  // type replaces config's.
  Translator(ModelConfig config, std::shared_ptr<decoding::TranslationModel> model,
             data::Vocab source_vocab, data::Vocab target_vocab);

  // Sentences are sorted by length and translated in batches of `batch_size`; results come
  // back in input order. An <unk> or placeholder in the output becomes the source token with
  // the highest attention at that step.
  //
  // `parallel_batches` > 1 translates that many batches at once, each on a thread of its own
  // with single-threaded BLAS (CTranslate2's inter_threads); 0 takes one per thread given to
  // set_threads (attnkit --threads). A
  // batch's search is the same whichever thread runs it, so the results are identical to a
  // sequential run. Worth it on throughput jobs: each core then runs its own search without
  // waiting at every step for the other's share of a product (docs/PERFORMANCE.md).
  // `stats`, if given, is added the searches' work.
  // `prefixes`, when given (one per sentence, "" for none): the start each translation must
  // have (decoding::SearchOptions::target_prefix), tokenized as the model's targets.
  std::vector<Translation> translate(const std::vector<std::string>& sentences,
                                     const decoding::SearchOptions& options, size_t batch_size = 32,
                                     int parallel_batches = 1,
                                     decoding::SearchStats* stats = nullptr,
                                     const std::vector<std::string>& prefixes = {});

  // The log-probability of each targets[i] as the translation of sources[i], token by token
  // (a target token the vocabulary lacks is scored as <unk>). An empty source scores nothing.
  std::vector<Scoring> score(const std::vector<std::string>& sources,
                             const std::vector<std::string>& targets, size_t batch_size = 32,
                             double length_penalty = 1.0);

  // The `n` most likely tokens after each prefix (prefixes[i], "" or none for the first
  // position), each continued by the search: CTranslate2's return_alternatives. Most likely
  // first; <pad>, <s> and <unk> are never one, the end of the sentence may be.
  std::vector<std::vector<Alternative>> alternatives(const std::vector<std::string>& sentences,
                                                     const std::vector<std::string>& prefixes,
                                                     size_t n,
                                                     const decoding::SearchOptions& options,
                                                     size_t batch_size = 32);

  // Batches by tokens as well as by sentences (CTranslate2's batch_type "tokens"): a batch
  // holds at most `tokens` source tokens, padding counted (its sentences x its longest); a
  // longer sentence is a batch of its own. 0: by sentences alone.
  void set_max_batch_tokens(size_t tokens) { max_batch_tokens_ = tokens; }

  // Fills each result's per-layer attention maps (Translation::cross_layers ...) with one
  // teacher-forced pass over its best hypothesis; nothing for a model whose one attention is
  // Translation::attention (the GRU model).
  void add_attention_maps(std::vector<Translation>& results);

  const ModelConfig& config() const { return config_; }
  decoding::TranslationModel& model() { return *model_; }
  torch::nn::Module& module();
  const data::Vocab& source_vocab() const { return source_vocab_; }
  const data::Vocab& target_vocab() const { return target_vocab_; }
  const data::Tokenizer& source_tokenizer() const { return *source_tok_; }
  const data::Tokenizer& target_tokenizer() const { return *target_tok_; }

 private:
  // Searches one batch (indices into `ids`) and fills their results.
  // translate() on encoded sentences: results[i].source_tokens tokenize ids[i]; `prefixes`
  // (empty, or one per sentence) are target ids.
  void translate_encoded(std::vector<Translation>& results,
                         const std::vector<std::vector<int64_t>>& ids,
                         const std::vector<std::vector<int64_t>>& prefixes,
                         const decoding::SearchOptions& options, size_t batch_size,
                         int parallel_batches, decoding::SearchStats* stats);
  // `prefixes`: each sentence's target prefix ids (empty: none).
  void translate_batch(const std::vector<size_t>& members,
                       const std::vector<std::vector<int64_t>>& ids,
                       const std::vector<std::vector<int64_t>>& prefixes,
                       const decoding::SearchOptions& options, std::vector<Translation>& results,
                       decoding::SearchStats* stats);

  ModelConfig config_;
  std::shared_ptr<decoding::TranslationModel> model_;
  data::Vocab source_vocab_, target_vocab_;
  std::unique_ptr<data::Tokenizer> source_tok_, target_tok_;
  std::string dir_;
  size_t max_batch_tokens_ = 0;
};

// Greedy translations of raw sentences, batches of 64, one batch per configured thread: what
// validation BLEU reads.
std::vector<std::string> greedy_texts(Translator& translator,
                                      const std::vector<std::string>& sources);

}  // namespace attnkit::translate
