#pragma once

#include <cstdint>
#include <string>

#include "attnkit/kernels/gemm/compute_type.h"
#include "attnkit/rnn/model.h"
#include "attnkit/transformer/model.h"

// A model directory holds everything `translate` needs:
//   config.json    the architecture and its options, tokenizer specs, vocabulary sizes
//   source.vocab   target.vocab
//   model.pt       the best weights (LibTorch archive); in an int8 directory (attnkit quantize,
//                  config.json's compute_type) a torch.save dict of int8 rows and their scales
//   checkpoint.pt  the training state, for resuming
//   metrics.jsonl  the training log
namespace attnkit::translate {

// The model's architecture: config.json's "arch" ("rnn" when absent, as before it existed).
// translate/registry.h is what each one means.
enum class Arch { Rnn, Transformer };
std::string to_string(Arch arch);
Arch parse_arch(const std::string& name);  // "rnn" | "transformer"

struct ModelConfig {
  Arch arch = Arch::Rnn;
  rnn::RnnOptions model{1, 1};                        // Arch::Rnn
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
  // The architecture's (translate/registry.cpp).
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

}  // namespace attnkit::translate
