#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "attnkit/train/batching.h"
#include "attnkit/train/distributed.h"
#include "attnkit/train/trainable.h"
#include "attnkit/train/validator.h"

namespace attnkit::train {

// What the loop reports while it runs; the caller decides what to show (apps/attnkit draws a
// progress bar). Only the main rank reports.
struct TrainEvent {
  enum class Kind {
    Step,        // after every optimizer step
    EpochEnd,    // after an epoch's validation
    Validation,  // a validation round within an epoch (TrainOptions::valid_every)
    Stopped,     // validation of a run cut short mid-epoch (time limit, Ctrl-C)
  };
  Kind kind = Kind::Step;
  int64_t epoch = 0, epochs = 0;  // the current epoch (0-based) and the planned count
  size_t batch = 0, batches = 0;  // the batch just done (0-based) and the epoch's count
  int64_t step = 0;
  double loss = 0;               // this step's loss, or the epoch's mean training loss
  double tokens_per_second = 0;  // target tokens, this epoch so far
  double eta_seconds = 0;        // to the end of the epoch
  Validation validation;         // EpochEnd and Stopped
};

struct TrainOptions {
  std::string model_dir;
  int64_t epochs = 10;
  double time_limit = 0;   // seconds of training; 0 = no limit
  int64_t max_steps = 0;   // stop (checkpointed) after this many optimizer steps; 0 = no limit
  size_t batch_size = 64;  // sentences
  // > 0: batches by size instead, up to this many tokens each, padding included (the longer side
  // of the longest pair x the sentences).
  size_t batch_tokens = 0;
  // Gradient accumulation: each optimizer step takes a batch this many times the size above and
  // runs it in this many pieces, one forward and backward each, summing their gradients. The step
  // is the large batch's (as with ranks, the pieces' losses are weighted by their tokens), at
  // the memory of one piece. Pieces are equal runs of the batch's length-sorted sentences.
  int64_t accumulate = 1;
  // Lanes: each batch (each piece, with accumulation) is cut into this many parts, trained at
  // once, a thread each, with every kernel of a part on its thread; their gradients are added
  // in part order. Two threads that share each product instead wait for each other through every
  // serial stretch between the products (the autograd engine's bookkeeping, the forward pass's
  // small ops). A lane takes every lanes-th sentence of the length-sorted batch, its loss is
  // weighted by its share of the tokens, and its dropout draws from a seed stream of its own
  // seeded in lane order: the result depends on the lanes, never on the threads (on fewer
  // threads, a thread runs several lanes in turn). 0: one lane per thread for a model that can
  // run in lanes (Trainable::runs_in_lanes) under ThreadPolicy::Kernels, one otherwise. One
  // process only (ranks sum their gradients as backward produces them).
  int64_t lanes = 0;
  double learning_rate = 1e-3;
  // > 0: the inverse-square-root schedule (Vaswani et al.): the rate rises linearly to
  // learning_rate over this many steps, then falls as 1/sqrt(step).
  int64_t warmup_steps = 0;
  double clip = 1.0;             // gradient-norm clipping; 0 = off
  double teacher_forcing = 1.0;  // chance of feeding the gold token
  double label_smoothing = 0.1;
  double lr_decay = 0.5;    // multiply the learning rate on a validation plateau
  int64_t lr_patience = 0;  // epochs without improvement before decaying
  int64_t early_stop = 3;   // epochs without improvement before stopping; 0 = never
  // > 0: a validation round (the best kept, plateau decay, early stopping, a checkpoint) every
  // this many steps instead of after each epoch: an epoch of a million pairs outlasts a run.
  // lr_patience and early_stop then count rounds.
  int64_t valid_every = 0;
  uint64_t seed = 1;
  size_t valid_bleu_sentences = 300;
  std::string bleu_tokenize = "13a";
  double entropy_bonus = 0.01;     // REINFORCE hard attention only
  double baseline_momentum = 0.9;  // REINFORCE moving-average baseline
  int64_t checkpoint_every = 500;  // steps; a checkpoint is also written every epoch and on stop
  // > 0: the weights of the last this many checkpoints are also kept, in
  // model_dir/checkpoints/step-NNNNNNNN.pt, for checkpoint averaging (train/averaging.h).
  int64_t keep_checkpoints = 0;
  bool resume = false;  // continue from model_dir/checkpoint.pt
  // Data-parallel training: each rank takes its shard of every global batch, gradients are
  // summed across ranks, and rank 0 validates, logs and checkpoints. Null: one process.
  Distributed* distributed = nullptr;
  std::function<void(const TrainEvent&)> on_event;  // optional
  // Greedy translations of raw sentences by the model being trained, for validation BLEU
  // (translate/training.h sets it); unset: validation by loss alone.
  std::function<std::vector<std::string>(const std::vector<std::string>&)> translate;
};

struct TrainData {
  std::vector<Example> train, valid;
  std::vector<std::string> valid_sources, valid_references;  // raw text, for validation BLEU
};

enum class StopReason {
  Epochs,         // every planned epoch ran
  EarlyStopping,  // validation stopped improving
  TimeLimit,
  MaxSteps,
  Interrupted,           // SIGINT
  StoppedByAnotherRank,  // another rank hit one of the above first
};
const char* to_string(StopReason reason);

struct TrainResult {
  int64_t steps = 0, epochs_done = 0;
  double best_valid_bleu = -1, best_valid_loss = 0, last_train_loss = 0;
  double train_seconds = 0;   // wall clock, from the first step to the last checkpoint
  double paused_seconds = 0;  // of which validating and writing checkpoints
  // Over the steps' own time (train_seconds less paused_seconds), as a training loop is timed.
  double target_tokens_per_second = 0;
  StopReason stopped_because = StopReason::Epochs;
};

// Trains `model` (Adam, clipping, label smoothing, teacher forcing, plateau decay, early
// stopping) and writes into options.model_dir (rank 0 only, when distributed): model.pt (best by
// validation BLEU, then loss), checkpoint.pt (model, optimizer, RNG and data position: a resumed
// run continues exactly), and metrics.jsonl. config.json and the vocabularies are the caller's to
// write. Ctrl-C stops it at the next batch, checkpointed.
TrainResult train_model(Trainable& model, const TrainData& data, const TrainOptions& options);

}  // namespace attnkit::train
