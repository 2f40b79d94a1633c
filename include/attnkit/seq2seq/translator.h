#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "attnkit/data/tokenizer.h"
#include "attnkit/data/vocab.h"
#include "attnkit/kernels/compute_type.h"
#include "attnkit/seq2seq/model.h"
#include "attnkit/seq2seq/search.h"
#include "attnkit/transformer/model.h"

// A model directory holds everything `translate` needs:
//   config.json    model options, tokenizer specs, vocabulary sizes
//   source.vocab   target.vocab
//   model.pt       the best weights (LibTorch archive); in an int8 directory (attnkit quantize,
//                  config.json's compute_type) a torch.save dict of int8 rows and their scales
//   checkpoint.pt  the training state, for resuming
//   metrics.jsonl  the training log
namespace attnkit::seq2seq {

// The model's architecture: config.json's "arch" ("rnn" when absent, as before it existed).
enum class Arch { Rnn, Transformer };
std::string to_string(Arch arch);
Arch parse_arch(const std::string& name);  // "rnn" | "transformer"

struct ModelConfig {
  Arch arch = Arch::Rnn;
  Seq2SeqOptions model{1, 1};                         // Arch::Rnn
  transformer::TransformerOptions transformer{1, 1};  // Arch::Transformer
  std::string source_tokenizer = "en";
  std::string target_tokenizer = "zh";
  // The language pair (train --source-lang/--target-lang, e.g. "en" and "zh_CN"; empty when not
  // given) and the training pairs' file (absolute): `po translate` checks a catalog's language
  // against target_lang and reuses the pairs as a translation memory.
  std::string source_lang, target_lang, train_corpus;
  // The model directory this config belongs to (not written: load_config sets it), which the
  // tokenizers' model files ("spm:source.spm.model") are relative to.
  std::string dir;
  int64_t source_vocab() const;
  int64_t target_vocab() const;
  // config.json's "compute_type" (float32 when absent): what decoding computes in, and for int8
  // how model.pt holds the weights. Kept in the architecture's options.
  kernels::ComputeType compute_type() const;
  void set_compute_type(kernels::ComputeType type);
};

void save_config(const std::string& dir, const ModelConfig& config);
// Throws attnkit::Error naming the file and the field on a missing or malformed config.
ModelConfig load_config(const std::string& dir);

// Weights of either architecture (a module's parameters and buffers) as model.pt.
void save_weights(torch::nn::Module& model, const std::string& path);
void load_weights(torch::nn::Module& model, const std::string& path);
// An int8 directory's model.pt: a torch.save dict of the module's parameters and buffers, each
// float matrix (the linear layers', the GRUs' and the embeddings' weights) as its int8 rows under
// its own name and their scales under NAME_scale (kernels/quantize.h), the rest as it is. Loading
// gives the module the matrices the int8 rows stand for.
void save_quantized_weights(torch::nn::Module& model, const std::string& path);
void load_quantized_weights(torch::nn::Module& model, const std::string& path);
// The latest weights in a training checkpoint (model_dir/checkpoint.pt).
void load_checkpoint_model(torch::nn::Module& model, const std::string& path);
inline void save_weights(Seq2Seq& model, const std::string& path) { save_weights(*model, path); }
inline void load_weights(Seq2Seq& model, const std::string& path) { load_weights(*model, path); }
inline void load_checkpoint_model(Seq2Seq& model, const std::string& path) {
  load_checkpoint_model(*model, path);
}

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
  // (kernels::alignment_layer), averaged.
  std::vector<at::Tensor> cross_layers, decoder_self_layers, encoder_self_layers;
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
  Translator(ModelConfig config, Seq2Seq model, data::Vocab source_vocab, data::Vocab target_vocab);
  Translator(ModelConfig config, transformer::TransformerModel model, data::Vocab source_vocab,
             data::Vocab target_vocab);

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
  std::vector<Translation> translate(const std::vector<std::string>& sentences,
                                     const SearchOptions& options, size_t batch_size = 32,
                                     int parallel_batches = 1, SearchStats* stats = nullptr);

  // Fills each result's per-layer attention maps (Translation::cross_layers ...) with one
  // teacher-forced pass over its best hypothesis; nothing for the GRU model, whose one attention
  // is Translation::attention.
  void add_attention_maps(std::vector<Translation>& results);

  const ModelConfig& config() const { return config_; }
  // The GRU model (null for a Transformer), the Transformer (null for a GRU model), and whichever
  // it is as a module.
  Seq2Seq& model() { return model_; }
  transformer::TransformerModel& transformer() { return transformer_; }
  torch::nn::Module& module();
  const data::Vocab& source_vocab() const { return source_vocab_; }
  const data::Vocab& target_vocab() const { return target_vocab_; }
  const data::Tokenizer& source_tokenizer() const { return *source_tok_; }
  const data::Tokenizer& target_tokenizer() const { return *target_tok_; }

 private:
  // Searches one batch (indices into `ids`) and fills their results.
  void translate_batch(const std::vector<size_t>& members,
                       const std::vector<std::vector<int64_t>>& ids, const SearchOptions& options,
                       std::vector<Translation>& results, SearchStats* stats);

  // The batch's hypotheses from whichever model this is.
  std::vector<std::vector<Hypothesis>> search_batch(const at::Tensor& source,
                                                    const at::Tensor& lengths,
                                                    const SearchOptions& options,
                                                    SearchStats* stats);

  ModelConfig config_;
  Seq2Seq model_{nullptr};
  transformer::TransformerModel transformer_{nullptr};
  data::Vocab source_vocab_, target_vocab_;
  std::unique_ptr<data::Tokenizer> source_tok_, target_tok_;
  std::string dir_;
};

// Greedy translations of raw sentences, batches of 64, one batch per configured thread: what
// validation BLEU reads.
std::vector<std::string> greedy_texts(Translator& translator,
                                      const std::vector<std::string>& sources);

// Pads token-id sequences into [B, max(len, 1)] with 0 and returns (ids, lengths).
std::pair<at::Tensor, at::Tensor> pad_batch(const std::vector<std::vector<int64_t>>& seqs);

}  // namespace attnkit::seq2seq
