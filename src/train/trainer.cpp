#include "attnkit/train/trainer.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/optim/adam.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "attnkit/core/error.h"
#include "attnkit/core/info.h"
#include "attnkit/core/signals.h"
#include "attnkit/kernels/cpu/lanes.h"
#include "attnkit/kernels/ops/dropout.h"
#include "attnkit/train/averaging.h"
#include "attnkit/train/checkpoint.h"
#include "attnkit/train/step.h"

namespace attnkit::train {
namespace fs = std::filesystem;

const char* to_string(StopReason reason) {
  switch (reason) {
    case StopReason::Epochs:
      return "epochs";
    case StopReason::EarlyStopping:
      return "early stopping";
    case StopReason::TimeLimit:
      return "time limit";
    case StopReason::MaxSteps:
      return "max steps";
    case StopReason::Interrupted:
      return "interrupted";
    case StopReason::StoppedByAnotherRank:
      return "stopped by another rank";
  }
  return "unknown";
}

namespace {

std::atomic<bool> g_interrupted{false};
void on_sigint(int) { g_interrupted = true; }

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

void set_lr(torch::optim::Adam& optimizer, double lr) {
  for (auto& group : optimizer.param_groups())
    static_cast<torch::optim::AdamOptions&>(group.options()).lr(lr);
}

// The inverse-square-root schedule's factor at `step` (1-based): step / warmup up to warmup, then
// sqrt(warmup / step); 1 at the peak.
double warmup_factor(int64_t step, int64_t warmup) {
  const double s = static_cast<double>(step), w = static_cast<double>(warmup);
  return std::min(s / w, std::sqrt(w / s));
}

// One epoch's running totals.
struct EpochTotals {
  Clock::time_point started = Clock::now();
  double loss_sum = 0;      // this rank's loss x its tokens
  int64_t loss_tokens = 0;  // this rank's tokens
  int64_t tokens = 0;       // all ranks' target tokens
  double mean_loss() const { return loss_tokens ? loss_sum / loss_tokens : 0; }
  double tokens_per_second() const { return tokens / std::max(seconds_since(started), 1e-9); }
};

// A training run: the loop and one method per phase of it.
class Run {
 public:
  Run(Trainable& model, const TrainData& data, const TrainOptions& o)
      : model_(model),
        data_(data),
        o_(o),
        dist_(o.distributed),
        main_rank_(!dist_ || dist_->is_main()),
        rank_(dist_ ? dist_->rank() : 0),
        world_(dist_ ? dist_->world_size() : 1),
        checkpoint_((fs::path(o.model_dir) / "checkpoint.pt").string()),
        parameters_(model.parameters()),
        optimizer_(parameters_, torch::optim::AdamOptions(o.learning_rate)),
        valid_data_{
            data.valid,      data.valid_sources, data.valid_references, o.valid_bleu_sentences,
            o.bleu_tokenize, o.translate},
        validator_(model, valid_data_, (fs::path(o.model_dir) / "model.pt").string(),
                   o.batch_size) {}

  TrainResult run() {
    start();
    for (; p_.epoch < o_.epochs; ++p_.epoch, p_.batch = 0) {
      const auto batches = make_batches(data_.train, o_.batch_size * accumulate_, o_.seed, p_.epoch,
                                        o_.batch_tokens * accumulate_);
      EpochTotals epoch;
      for (; p_.batch < static_cast<int64_t>(batches.size()); ++p_.batch) {
        const auto pieces = this_ranks_pieces(batches[p_.batch]);
        const auto [stop, global_tokens] = agree(local_stop_reason(), tokens_in(pieces));
        if (stop) return stopped(*stop, epoch, batches.size());
        const double loss = train_step(pieces, global_tokens, epoch);
        report_step(loss, epoch, batches.size());
        if (o_.valid_every > 0 && p_.step % o_.valid_every == 0) {
          result_.last_train_loss = epoch.mean_loss();
          if (validation_round(epoch, /*epoch_end=*/false))
            return finished(StopReason::EarlyStopping);
        } else {
          checkpoint_if_due();
        }
      }
      result_.last_train_loss = epoch.mean_loss();
      if (end_epoch(epoch)) return finished(StopReason::EarlyStopping);
    }
    return finished(StopReason::Epochs);
  }

 private:
  // Seeds every rank, or restores the checkpoint, and opens the metrics log.
  void start() {
    p_.lr = o_.learning_rate;
    p_.baseline.momentum = o_.baseline_momentum;
    if (o_.resume) {
      p_ = load_checkpoint(checkpoint_, model_, optimizer_, p_);
      set_lr(optimizer_, p_.lr);
      // The checkpoint holds rank 0's generator; the others continue from a seed of their own.
      if (rank_ > 0)
        at::manual_seed(o_.seed + 7919u * static_cast<uint64_t>(rank_) +
                        static_cast<uint64_t>(p_.step));
    } else {
      at::manual_seed(o_.seed + static_cast<uint64_t>(rank_));
    }
    if (main_rank_)
      log_.open((fs::path(o_.model_dir) / "metrics.jsonl").string(),
                o_.resume ? std::ios::app : std::ios::trunc);
    if (dist_)
      reducer_ = std::make_unique<GradientReducer>(*dist_, parameters_, dist_->bucket_bytes());
    model_.set_training(true);
    started_ = Clock::now();
  }

  std::optional<StopReason> local_stop_reason() const {
    if (g_interrupted) return StopReason::Interrupted;
    if (o_.time_limit > 0 && seconds_since(started_) >= o_.time_limit) return StopReason::TimeLimit;
    if (o_.max_steps > 0 && result_.steps >= o_.max_steps) return StopReason::MaxSteps;
    return std::nullopt;
  }

  // Part `part` of `parts` of a batch: contiguous, so the parts together cover it once.
  static std::vector<size_t> part_of(const std::vector<size_t>& batch, size_t part, size_t parts) {
    const size_t n = batch.size();
    return {batch.begin() + n * part / parts, batch.begin() + n * (part + 1) / parts};
  }

  // Lane `lane` of `lanes`: every lanes-th sentence from the lane-th. The batch's sentences come
  // sorted by length, so each lane gets about as many tokens (contiguous halves left the lane
  // with the longer half 16 % of the step to run alone).
  static std::vector<size_t> lane_of(const std::vector<size_t>& members, size_t lane,
                                     size_t lanes) {
    std::vector<size_t> out;
    for (size_t i = lane; i < members.size(); i += lanes) out.push_back(members[i]);
    return out;
  }

  // The global batch cut into the accumulation's pieces, and of each piece this rank's shard.
  std::vector<std::vector<size_t>> this_ranks_pieces(const std::vector<size_t>& batch) const {
    std::vector<std::vector<size_t>> pieces;
    for (size_t k = 0; k < static_cast<size_t>(accumulate_); ++k)
      pieces.push_back(part_of(part_of(batch, k, accumulate_), rank_, world_));
    return pieces;
  }

  int64_t tokens_in(const std::vector<size_t>& members) const {
    int64_t tokens = 0;
    for (size_t i : members) tokens += static_cast<int64_t>(data_.train[i].target.size()) + 1;
    return tokens;
  }
  int64_t tokens_in(const std::vector<std::vector<size_t>>& pieces) const {
    int64_t tokens = 0;
    for (const auto& piece : pieces) tokens += tokens_in(piece);
    return tokens;
  }

  // One small all-reduce agrees on stopping (ranks see clocks and signals differently) and
  // counts the global batch's tokens.
  std::pair<std::optional<StopReason>, int64_t> agree(std::optional<StopReason> stop,
                                                      int64_t local_tokens) const {
    if (!dist_) return {stop, local_tokens};
    auto agreed = dist_->allreduce_sum({stop ? 1.0 : 0.0, static_cast<double>(local_tokens)});
    if (agreed[0] > 0 && !stop) stop = StopReason::StoppedByAnotherRank;
    return {stop, static_cast<int64_t>(agreed[1])};
  }

  // Forward and backward of each piece, gradient all-reduce, clipping and the Adam update;
  // returns this rank's mean token loss (0 for an empty shard).
  double train_step(const std::vector<std::vector<size_t>>& pieces, int64_t global_tokens,
                    EpochTotals& epoch) {
    clear_gradients(parameters_);
    if (reducer_) reducer_->prepare();
    size_t last = pieces.size();  // the last piece with sentences on this rank
    for (size_t k = 0; k < pieces.size(); ++k)
      if (!pieces[k].empty()) last = k;
    double loss_sum = 0;
    int64_t tokens = 0;
    for (size_t k = 0; k < pieces.size(); ++k) {
      if (pieces[k].empty()) continue;
      if (reducer_) reducer_->begin_pass(k == last);
      const auto l = forward_backward(pieces[k], global_tokens);
      loss_sum += l * tokens_in(pieces[k]);
      tokens += tokens_in(pieces[k]);
    }
    if (reducer_) reducer_->finish();
    update_weights();
    epoch.loss_sum += loss_sum;
    epoch.loss_tokens += tokens;
    epoch.tokens += global_tokens;
    tokens_done_ += global_tokens;
    return tokens ? loss_sum / tokens : 0;
  }

  // One piece's forward and backward, adding to the gradients; returns its mean token loss.
  double forward_backward(const std::vector<size_t>& members, int64_t global_tokens) {
    if (lanes_ > 1) return forward_backward_in_lanes(members, global_tokens);
    const auto batch = collate(data_.train, members);
    auto l = model_.loss(batch, loss_options(), p_.baseline);
    // Weighted by this piece's share of the tokens, the summed gradients are the gradient of
    // the global batch's mean loss: the same step one process with one piece would take.
    if (dist_ || accumulate_ > 1)
      l.objective = l.objective * (static_cast<double>(batch.target_tokens) /
                                   std::max<int64_t>(global_tokens, 1));
    l.objective.backward();
    return l.loss.item<double>();
  }

  // The same, the piece cut into lanes_ parts whose forward and backward passes run at once, a
  // thread each (TrainOptions::lanes); their gradients are then added in part order.
  double forward_backward_in_lanes(const std::vector<size_t>& members, int64_t global_tokens) {
    const auto lanes = static_cast<size_t>(lanes_);
    std::vector<uint64_t> seeds(lanes);
    for (auto& seed : seeds) seed = kernels::next_dropout_seed();  // in part order
    std::vector<std::vector<at::Tensor>> gradients(lanes);
    std::vector<double> losses(lanes, 0);
    kernels::run_lanes(lanes_, [&](int64_t lane) {
      const auto part = lane_of(members, lane, lanes);
      if (part.empty()) return;
      kernels::DropoutSeedStream stream(seeds[lane]);
      const auto batch = collate(data_.train, part);
      auto l = model_.loss(batch, loss_options(), p_.baseline);
      const auto objective = l.objective * (static_cast<double>(batch.target_tokens) /
                                            std::max<int64_t>(global_tokens, 1));
      gradients[lane] = torch::autograd::grad({objective}, unique_parameters_, /*grad_outputs=*/{},
                                              /*retain_graph=*/false, /*create_graph=*/false,
                                              /*allow_unused=*/true);
      losses[lane] = l.loss.item<double>();
    });
    add_gradients(unique_parameters_, gradients);
    double loss_sum = 0;
    int64_t tokens = 0;
    for (size_t lane = 0; lane < lanes; ++lane) {
      const auto part_tokens = tokens_in(lane_of(members, lane, lanes));
      loss_sum += losses[lane] * part_tokens;
      tokens += part_tokens;
    }
    return tokens ? loss_sum / tokens : 0;
  }

  LossOptions loss_options() const {
    return {o_.label_smoothing, o_.teacher_forcing, o_.entropy_bonus};
  }

  // TrainOptions::lanes resolved: what was asked, or one per kernel thread for a model that can.
  int64_t lanes() const {
    const bool can = model_.runs_in_lanes() && !dist_;
    if (o_.lanes > 1 && !can)
      throw Error("train: --lanes " + std::to_string(o_.lanes) + ": " +
                  (dist_ ? std::string("lanes are for one process (ranks split the batch)")
                         : std::string("this model cannot train in lanes")) +
                  "; use --lanes 1");
    if (o_.lanes > 0) return o_.lanes;
    // Under the other policies LibTorch or OpenBLAS own the threads, and each lane would start
    // a team of its own.
    return can && configured_policy() == ThreadPolicy::Kernels ? configured_threads() : 1;
  }

  // Each parameter once (a shared embedding is listed under both of its names).
  static std::vector<at::Tensor> unique(const std::vector<at::Tensor>& parameters) {
    std::vector<at::Tensor> out;
    std::set<const void*> seen;
    for (const auto& p : parameters)
      if (seen.insert(p.unsafeGetTensorImpl()).second) out.push_back(p);
    return out;
  }

  // Clipping, the learning-rate schedule and the Adam update.
  void update_weights() {
    const double grad_scale = o_.clip > 0 ? grad_clip(parameters_, o_.clip).scale : 1;
    if (o_.warmup_steps > 0)
      set_lr(optimizer_, p_.lr * warmup_factor(p_.step + 1, o_.warmup_steps));
    adam_step(optimizer_, grad_scale);
    ++p_.step;
    ++result_.steps;
  }

  void report_step(double loss, const EpochTotals& epoch, size_t batches) {
    epochs_done_ = p_.epoch + static_cast<double>(p_.batch + 1) / batches;
    if (!main_rank_ || !o_.on_event) return;
    TrainEvent e = event(TrainEvent::Kind::Step, batches);
    e.loss = loss;
    e.tokens_per_second = epoch.tokens_per_second();
    e.eta_seconds = seconds_since(epoch.started) / (p_.batch + 1) * (batches - p_.batch - 1);
    o_.on_event(e);
  }

  void checkpoint_if_due() {
    if (!main_rank_ || o_.checkpoint_every <= 0 || p_.step % o_.checkpoint_every != 0) return;
    Position next = p_;
    ++next.batch;
    checkpoint(next);
  }

  // checkpoint.pt, and the weights kept for averaging.
  void checkpoint(const Position& next) {
    const auto start = Clock::now();
    save_checkpoint(checkpoint_, model_, optimizer_, next);
    keep_weights(model_, o_.model_dir, p_.step, o_.keep_checkpoints);
    paused_seconds_ += seconds_since(start);
  }

  Validation validate() {
    const auto start = Clock::now();
    Validation v = validator_.validate(p_);
    paused_seconds_ += seconds_since(start);
    return v;
  }

  // The end of an epoch: a validation round, unless rounds come every valid_every steps.
  bool end_epoch(const EpochTotals& epoch) {
    ++result_.epochs_done;
    if (o_.valid_every <= 0) return validation_round(epoch, /*epoch_end=*/true);
    if (main_rank_) checkpoint(next_position(/*epoch_end=*/true));
    return false;
  }

  // Where a checkpoint written now resumes: the next batch, or the next epoch's first.
  Position next_position(bool epoch_end) const {
    Position next = p_;
    if (epoch_end) {
      ++next.epoch;
      next.batch = 0;
    } else {
      ++next.batch;
    }
    return next;
  }

  // Rank 0 validates, keeps the best, adapts the learning rate and decides whether to stop; the
  // other ranks follow its decisions. Returns whether to stop early. After every epoch, or every
  // valid_every steps (a corpus so large that an epoch outlasts the run).
  bool validation_round(const EpochTotals& epoch, bool epoch_end) {
    bool early = false;
    if (main_rank_) {
      const Validation v = validate();
      if (v.better) {
        p_.best_bleu = v.bleu;
        p_.best_loss = std::min(p_.best_loss, v.loss);
        p_.bad_epochs = p_.bad_lr_epochs = 0;
      } else {
        ++p_.bad_epochs;
        if (++p_.bad_lr_epochs > o_.lr_patience) {
          p_.lr *= o_.lr_decay;
          p_.bad_lr_epochs = 0;
        }
      }
      early = o_.early_stop > 0 && p_.bad_epochs >= o_.early_stop;
      log({{"epoch", epoch_end ? static_cast<double>(p_.epoch + 1) : epochs_done_},
           {"step", p_.step},
           {"train_loss", result_.last_train_loss},
           {"valid_loss", v.loss},
           {"valid_bleu", v.bleu},
           {"lr", p_.lr},
           {"target_tokens_per_s", epoch.tokens_per_second()},
           {"elapsed_s", seconds_since(started_)},
           {"best", v.better},
           {"ranks", world_}});
      report_validation(epoch_end ? TrainEvent::Kind::EpochEnd : TrainEvent::Kind::Validation, v);
    }
    if (dist_) {
      auto decided = dist_->broadcast({p_.lr, early ? 1.0 : 0.0});
      p_.lr = decided[0];
      early = decided[1] > 0;
    }
    set_lr(optimizer_, p_.lr);
    if (main_rank_) checkpoint(next_position(epoch_end));
    if (early && epoch_end) ++p_.epoch;
    return early;
  }

  // A run cut short mid-epoch: checkpointed where it stands. Without validation the latest
  // weights are the best we know of. With it, a run cut short by its time limit or by Ctrl-C
  // validates its last weights too, so the partial epoch's work is not lost; the checkpoint's
  // own record of the best is left alone, so a resumed run makes the decisions an uninterrupted
  // one would.
  TrainResult stopped(StopReason why, const EpochTotals& epoch, size_t batches) {
    result_.last_train_loss = epoch.mean_loss();
    if (main_rank_) {
      checkpoint(p_);
      if (!validator_.has_data() || !validator_.has_best()) {
        validator_.keep_current();
      } else if (why != StopReason::MaxSteps && p_.batch > 0) {
        const Validation v = validate();
        log({{"epoch", epochs_done_},
             {"step", p_.step},
             {"valid_loss", v.loss},
             {"valid_bleu", v.bleu},
             {"best", v.better},
             {"final", true}});
        if (v.better) p_.best_bleu = v.bleu;
        report_validation(TrainEvent::Kind::Stopped, v);
      }
    }
    return finished(why);
  }

  TrainResult finished(StopReason why) {
    result_.stopped_because = why;
    result_.best_valid_bleu = p_.best_bleu;
    result_.best_valid_loss = p_.best_loss;
    result_.train_seconds = seconds_since(started_);
    result_.paused_seconds = paused_seconds_;
    result_.target_tokens_per_second =
        tokens_done_ / std::max(result_.train_seconds - paused_seconds_, 1e-9);
    return result_;
  }

  TrainEvent event(TrainEvent::Kind kind, size_t batches) const {
    TrainEvent e;
    e.kind = kind;
    e.epoch = p_.epoch;
    e.epochs = o_.epochs;
    e.batch = static_cast<size_t>(p_.batch);
    e.batches = batches;
    e.step = p_.step;
    return e;
  }

  void report_validation(TrainEvent::Kind kind, const Validation& v) {
    if (!o_.on_event) return;
    TrainEvent e = event(kind, 0);
    e.loss = result_.last_train_loss;
    e.validation = v;
    o_.on_event(e);
  }

  void log(const nlohmann::json& line) { log_ << line.dump() << "\n" << std::flush; }

  Trainable& model_;
  const TrainData& data_;
  const TrainOptions& o_;
  Distributed* dist_;
  const bool main_rank_;
  const int rank_, world_;
  const int64_t accumulate_ = std::max<int64_t>(1, o_.accumulate);
  const std::string checkpoint_;
  // The model's parameters, the tensors the optimizer updates, listed once: a module lists them by
  // walking its submodules and naming each, 0.35 % of a Transformer training step twice a step.
  const std::vector<at::Tensor> parameters_;
  const std::vector<at::Tensor> unique_parameters_ = unique(parameters_);
  const int64_t lanes_ = lanes();
  torch::optim::Adam optimizer_;
  ValidationData valid_data_;
  Validator validator_;
  std::unique_ptr<GradientReducer> reducer_;
  std::ofstream log_;
  Position p_;
  TrainResult result_;
  Clock::time_point started_;
  int64_t tokens_done_ = 0;
  double paused_seconds_ = 0;  // validating and writing checkpoints, not training
  double epochs_done_ = 0;     // fractional, for the log
};

}  // namespace

TrainResult train_model(Trainable& model, const TrainData& data, const TrainOptions& o) {
  if (data.train.empty()) throw Error("train: no training pairs left after filtering");
  fs::create_directories(o.model_dir);
  g_interrupted = false;
  SignalGuard ctrl_c({SIGINT}, on_sigint);
  return Run(model, data, o).run();
}

}  // namespace attnkit::train
