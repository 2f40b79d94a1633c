#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

// Search strategies over one decoder-step interface (StepDecoder), which each model implements
// (rnn/search.h, transformer/search.h): nothing here knows an architecture.
namespace attnkit::decoding {

struct SearchOptions {
  int64_t beam_size = 5;          // 1 = greedy
  double length_penalty = 1.0;    // score / length^alpha; 0 = raw log-probability
  double max_length_ratio = 2.0;  // at most ratio * source length + max_length_extra tokens
  int64_t max_length_extra = 5;
  int64_t nbest = 1;
  // Penalties against what small models do on unseen text: a word twice ("IP IP"), a phrase
  // again, a source word dropped. Off by default; docs/translation.md measures each.
  // A token the hypothesis already wrote has its logit divided by this (multiplied when
  // negative), as CTRL's repetition penalty; 1: none.
  double repetition_penalty = 1.0;
  // No n-gram of this many tokens twice in a hypothesis; 0: allowed.
  int64_t no_repeat_ngram = 0;
  // GNMT's coverage penalty, beam search only: a finished hypothesis's score gains
  // beta * sum over its source tokens of log(min(1, the attention they received)); 0: none.
  double coverage_penalty = 0;
  // Random sampling instead of the best token, greedy search only (beam_size 1), as
  // CTranslate2's: from the `sampling_topk` most likely tokens (1: the best, i.e. no sampling;
  // 0: all), within the smallest set whose probability reaches `sampling_topp`, at
  // `temperature`. Each sentence draws from its own generator, seeded by `seed` and its stream:
  // streams[b] for sentence b of the batch (the translator gives each sentence its place in
  // the input), else b. The same seed and input give the same output, whatever the batches.
  int64_t sampling_topk = 1;
  double sampling_topp = 1.0;
  double temperature = 1.0;
  uint64_t seed = 0;
  std::vector<uint64_t> streams;
  // Per sentence of the batch: tokens the translation must start with (ids; only the last may
  // be <eos>, which ends it there). A forced token's log-probability is not in the score.
  std::vector<std::vector<int64_t>> target_prefix;
  // Decode on the model's fused inference kernels where its configuration allows (the GRU
  // model's rnn::FusedStep); false: its modules' own step, the reference.
  bool fused = true;
};

struct Hypothesis {
  std::vector<int64_t> tokens;  // without <sos>/<eos>
  double score = 0;             // length-normalised log-probability
  double log_prob = 0;          // raw log-probability (including <eos>)
  at::Tensor attention;         // [T, S] for the emitted tokens (and <eos>)
};

// What a search computed, added to by each search it is passed to: the work behind a speed, for
// utilisation figures (bench/performance.py).
struct SearchStats {
  int64_t source_tokens = 0;  // encoded, padding not counted
  int64_t decoder_rows = 0;   // decoder steps summed over the rows (sentences x beams) they ran
};

// What a search drives: a batch of sentences encoded once, then decoded one step at a time over
// rows in sentence-major order (row = sentence x width + beam).
class StepDecoder {
 public:
  struct Step {
    at::Tensor logits;     // [N, V]
    at::Tensor attention;  // [N, S]: what the search keeps per token (pictures, <unk> copying)
  };
  virtual ~StepDecoder() = default;
  // tokens [N]: each row's latest token.
  virtual Step step(const at::Tensor& tokens) = 0;
  // Row i of the next step continues row origin[i]. `sentences`, when defined, are the sentences
  // that remain, as indices into the current ones (undefined: the same sentences); each then has
  // `width` rows.
  virtual void reorder(const at::Tensor& origin, const at::Tensor& sentences, int64_t width) = 0;
};

// Searches over a started decoder; lengths [B] are the source lengths (for length limits).
std::vector<std::vector<Hypothesis>> greedy_search(StepDecoder& decoder, const at::Tensor& lengths,
                                                   const SearchOptions& options,
                                                   SearchStats* stats = nullptr);
std::vector<std::vector<Hypothesis>> beam_search(StepDecoder& decoder, const at::Tensor& lengths,
                                                 const SearchOptions& options,
                                                 SearchStats* stats = nullptr);
std::vector<std::vector<Hypothesis>> search(StepDecoder& decoder, const at::Tensor& lengths,
                                            const SearchOptions& options,
                                            SearchStats* stats = nullptr);

}  // namespace attnkit::decoding
