#include "attnkit/train/trainer.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/optim/adam.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "attnkit/core/error.h"
#include "attnkit/eval/metrics.h"

namespace attnkit::train {
namespace fs = std::filesystem;
using seq2seq::Seq2Seq;

namespace {

std::atomic<bool> g_interrupted{false};
void on_sigint(int) { g_interrupted = true; }

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

std::string clock_text(double s) {
  char buf[32];
  const int t = static_cast<int>(s);
  std::snprintf(buf, sizeof buf, "%d:%02d:%02d", t / 3600, t / 60 % 60, t % 60);
  return buf;
}

// A one-line progress bar on stderr: redrawn in place on a terminal, a line every 10 s in a log.
class Progress {
 public:
  explicit Progress(bool enabled) : enabled_(enabled), tty_(isatty(STDERR_FILENO)) {}
  void update(int64_t epoch, int64_t epochs, size_t batch, size_t batches, double tokens_per_s,
              double loss, double eta) {
    if (!enabled_) return;
    const double since = seconds_since(last_);
    if (since < (tty_ ? 0.25 : 10.0) && batch + 1 != batches) return;
    last_ = Clock::now();
    const int width = 24,
              filled = static_cast<int>(width * (batch + 1) / std::max<size_t>(batches, 1));
    std::string bar(filled, '=');
    bar.resize(width, ' ');
    std::fprintf(stderr, "%sepoch %lld/%lld [%s] %3d%% %7.0f tok/s  loss %.3f  ETA %s%s",
                 tty_ ? "\r" : "", static_cast<long long>(epoch + 1),
                 static_cast<long long>(epochs), bar.c_str(),
                 static_cast<int>(100 * (batch + 1) / std::max<size_t>(batches, 1)), tokens_per_s,
                 loss, clock_text(eta).c_str(), tty_ ? "\033[K" : "\n");
    std::fflush(stderr);
  }
  void end_line() {
    if (enabled_ && tty_) std::fprintf(stderr, "\n");
  }

 private:
  bool enabled_, tty_;
  Clock::time_point last_ = Clock::now() - std::chrono::hours(1);
};

struct Position {
  int64_t epoch = 0, batch = 0, step = 0, bad_epochs = 0, bad_lr_epochs = 0;
  double best_bleu = -1, best_loss = 1e30, lr = 0, baseline = 0;
  bool baseline_set = false;
};

void save_checkpoint(const std::string& path, Seq2Seq& model, torch::optim::Adam& optimizer,
                     const Position& p) {
  torch::serialize::OutputArchive archive, model_archive, optimizer_archive;
  model->save(model_archive);
  optimizer.save(optimizer_archive);
  archive.write("model", model_archive);
  archive.write("optimizer", optimizer_archive);
  archive.write("rng", at::detail::getDefaultCPUGenerator().get_state());
  archive.write("position", at::tensor({p.epoch, p.batch, p.step, p.bad_epochs, p.bad_lr_epochs,
                                        static_cast<int64_t>(p.baseline_set)}));
  archive.write("metrics", at::tensor({p.best_bleu, p.best_loss, p.lr, p.baseline}, at::kDouble));
  const std::string tmp = path + ".tmp";
  archive.save_to(tmp);
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    throw Error(path + ": cannot write the checkpoint");
}

Position load_checkpoint(const std::string& path, Seq2Seq& model, torch::optim::Adam& optimizer) {
  if (!fs::exists(path)) throw Error(path + ": no checkpoint to resume from");
  torch::serialize::InputArchive archive, model_archive, optimizer_archive;
  at::Tensor rng, position, metrics;
  try {
    archive.load_from(path);
    archive.read("model", model_archive);
    archive.read("optimizer", optimizer_archive);
    model->load(model_archive);
    optimizer.load(optimizer_archive);
    archive.read("rng", rng);
    archive.read("position", position);
    archive.read("metrics", metrics);
  } catch (const c10::Error& e) {
    std::string what = e.what_without_backtrace();
    throw Error(path + ": cannot resume (" + what.substr(0, what.find('\n')) + ")");
  }
  auto generator = at::detail::getDefaultCPUGenerator();
  generator.set_state(rng);
  Position p;
  auto pos = position.accessor<int64_t, 1>();
  auto met = metrics.accessor<double, 1>();
  p.epoch = pos[0];
  p.batch = pos[1];
  p.step = pos[2];
  p.bad_epochs = pos[3];
  p.bad_lr_epochs = pos[4];
  p.baseline_set = pos[5] != 0;
  p.best_bleu = met[0];
  p.best_loss = met[1];
  p.lr = met[2];
  p.baseline = met[3];
  return p;
}

void set_lr(torch::optim::Adam& optimizer, double lr) {
  for (auto& group : optimizer.param_groups())
    static_cast<torch::optim::AdamOptions&>(group.options()).lr(lr);
}

// The loss from the output layer's input (Head::Features), with the model's output layer.
at::Tensor output_loss(Seq2Seq& model, const at::Tensor& features, const at::Tensor& target,
                       double smoothing) {
  const auto& layer = model->decoder->output;
  return projected_loss(features, layer->weight, layer->bias, target, smoothing,
                        model->options.fused_kernels());
}

double validation_loss(Seq2Seq& model, const std::vector<Example>& valid, size_t batch_size) {
  if (valid.empty()) return 0;
  torch::NoGradGuard no_grad;
  model->eval();
  double total = 0;
  int64_t tokens = 0;
  for (size_t start = 0; start < valid.size(); start += batch_size) {
    std::vector<size_t> members;
    for (size_t i = start; i < std::min(valid.size(), start + batch_size); ++i)
      members.push_back(i);
    auto b = collate(valid, members);
    const auto real = b.target_out != data::Vocab::kPad;  // the real tokens only
    auto out = model->forward(b.source, b.lengths, b.target_in, 1.0, real, seq2seq::Head::Features);
    total +=
        output_loss(model, out.features, b.target_out.masked_select(real), 0.0).item<double>() *
        b.target_tokens;
    tokens += b.target_tokens;
  }
  model->train();
  return total / std::max<int64_t>(tokens, 1);
}

}  // namespace

void load_checkpoint_weights(Seq2Seq& model, const std::string& path) {
  if (!fs::exists(path)) throw Error(path + ": no such checkpoint");
  try {
    torch::serialize::InputArchive archive, model_archive;
    archive.load_from(path);
    archive.read("model", model_archive);
    model->load(model_archive);
  } catch (const c10::Error& e) {
    std::string what = e.what_without_backtrace();
    throw Error(path + ": cannot read the weights (" + what.substr(0, what.find('\n')) + ")");
  }
}

TrainResult train_model(Seq2Seq& model, const seq2seq::ModelConfig& config,
                        const data::Vocab& source_vocab, const data::Vocab& target_vocab,
                        const TrainData& data, const TrainOptions& o) {
  if (data.train.empty()) throw Error("train: no training pairs left after filtering");
  Distributed* dist = o.distributed;
  const bool main_rank = !dist || dist->is_main();
  const int rank = dist ? dist->rank() : 0, world = dist ? dist->world_size() : 1;
  fs::create_directories(o.model_dir);
  const std::string checkpoint = (fs::path(o.model_dir) / "checkpoint.pt").string();
  const std::string best_path = (fs::path(o.model_dir) / "model.pt").string();
  const bool reinforce = config.model.weighting() == WeightingKind::Hard &&
                         config.model.hard_gradient() == HardGradient::Reinforce;

  torch::optim::Adam optimizer(model->parameters(), torch::optim::AdamOptions(o.learning_rate));
  Position p;
  p.lr = o.learning_rate;
  if (o.resume) {
    p = load_checkpoint(checkpoint, model, optimizer);
    set_lr(optimizer, p.lr);
    // The checkpoint holds rank 0's generator; the others continue from a seed of their own.
    if (rank > 0)
      at::manual_seed(o.seed + 7919u * static_cast<uint64_t>(rank) + static_cast<uint64_t>(p.step));
  } else {
    at::manual_seed(static_cast<uint64_t>(o.seed) + static_cast<uint64_t>(rank));
  }
  std::ofstream log;
  if (main_rank)
    log.open((fs::path(o.model_dir) / "metrics.jsonl").string(),
             o.resume ? std::ios::app : std::ios::trunc);
  auto previous_handler = std::signal(SIGINT, on_sigint);
  g_interrupted = false;

  TrainResult result;
  Progress progress(o.progress && main_rank);
  std::unique_ptr<GradientReducer> reducer;
  if (dist)
    reducer = std::make_unique<GradientReducer>(*dist, model->parameters(), dist->bucket_bytes());
  const auto started = Clock::now();
  int64_t tokens_done = 0;
  // Validation loss, and BLEU of greedy translations of the first valid sentences.
  auto validate = [&]() -> std::pair<double, double> {
    const double valid_loss = validation_loss(model, data.valid, o.batch_size);
    double bleu = -1;
    if (!data.valid_sources.empty()) {
      const size_t n = std::min(o.valid_bleu_sentences, data.valid_sources.size());
      std::vector<std::string> sources(data.valid_sources.begin(), data.valid_sources.begin() + n);
      std::vector<std::string> refs(data.valid_references.begin(),
                                    data.valid_references.begin() + n);
      seq2seq::Translator translator(config, model, source_vocab, target_vocab);
      seq2seq::SearchOptions greedy;
      greedy.beam_size = 1;
      std::vector<std::string> hyps;
      for (auto& t : translator.translate(sources, greedy, 64, /*parallel_batches=*/0))
        hyps.push_back(t.text);
      eval::BleuOptions bo;
      bo.tokenize = o.bleu_tokenize;
      bleu = eval::corpus_bleu(hyps, {refs}, bo).score;
    }
    model->train();
    return {valid_loss, bleu};
  };

  model->train();
  bool stop = false;
  double epochs_done = p.epoch;  // fractional, for the log
  for (; p.epoch < o.epochs && !stop; ++p.epoch, p.batch = 0) {
    const auto batches = make_batches(data.train, o.batch_size, o.seed, p.epoch);
    double loss_sum = 0;
    int64_t loss_tokens = 0;
    const auto epoch_started = Clock::now();
    int64_t epoch_tokens = 0;
    for (; p.batch < static_cast<int64_t>(batches.size()); ++p.batch) {
      std::string why;
      if (g_interrupted)
        why = "interrupted";
      else if (o.time_limit > 0 && seconds_since(started) >= o.time_limit)
        why = "time limit";
      else if (o.max_steps > 0 && result.steps >= o.max_steps)
        why = "max steps";
      // This rank's shard of the global batch: contiguous, so ranks together cover it once.
      std::vector<size_t> members = batches[p.batch];
      if (dist) {
        const size_t n = members.size();
        members = std::vector<size_t>(members.begin() + n * rank / world,
                                      members.begin() + n * (rank + 1) / world);
      }
      int64_t local_tokens = 0;
      for (size_t i : members)
        local_tokens += static_cast<int64_t>(data.train[i].target.size()) + 1;
      int64_t global_tokens = local_tokens;
      if (dist) {
        // One small all-reduce agrees on stopping (ranks see clocks and signals differently)
        // and counts the global batch's tokens.
        auto agreed =
            dist->allreduce_sum({why.empty() ? 0.0 : 1.0, static_cast<double>(local_tokens)});
        if (agreed[0] > 0 && why.empty()) why = "stopped by another rank";
        global_tokens = static_cast<int64_t>(agreed[1]);
      }
      if (!why.empty()) {
        result.stopped_because = why;
        stop = true;
        break;
      }
      clear_gradients(model->parameters());
      if (reducer) reducer->prepare();
      at::Tensor loss, objective;
      int64_t batch_tokens = 0;
      if (!members.empty()) {
        auto b = collate(data.train, members);
        batch_tokens = b.target_tokens;
        // The real target tokens only, padding skipped, through the output layer fused with
        // the loss; REINFORCE's reward reads every position's logits, and a partly
        // free-running decoder needs each step's.
        const auto real = reinforce ? at::Tensor() : b.target_out != data::Vocab::kPad;
        const bool fused_head = !reinforce && o.teacher_forcing >= 1.0;
        auto out = model->forward(b.source, b.lengths, b.target_in, o.teacher_forcing, real,
                                  fused_head ? seq2seq::Head::Features : seq2seq::Head::Logits);
        const auto target = real.defined() ? b.target_out.masked_select(real) : b.target_out;
        loss = fused_head ? output_loss(model, out.features, target, o.label_smoothing)
                          : sequence_loss(out.logits, target, o.label_smoothing);
        objective = loss;
        if (reinforce && out.log_prob.defined()) {
          // Xu et al. (2015): reward = -per-sentence NLL, a moving-average baseline, entropy bonus.
          auto mask = (b.target_out != data::Vocab::kPad).to(at::kFloat);
          auto nll = -at::log_softmax(out.logits.detach(), -1)
                          .gather(-1, b.target_out.unsqueeze(-1))
                          .squeeze(-1);
          auto reward = -(nll * mask).sum(1) / mask.sum(1).clamp_min(1);  // [B]
          const double mean_reward = reward.mean().item<double>();
          if (!p.baseline_set) {
            p.baseline = mean_reward;
            p.baseline_set = true;
          }
          auto advantage = (reward - p.baseline).unsqueeze(1);  // [B, 1]
          const double ntok = mask.sum().item<double>();
          objective = objective - (advantage * out.log_prob * mask).sum() / ntok -
                      o.entropy_bonus * (out.entropy * mask).sum() / ntok;
          p.baseline = o.baseline_momentum * p.baseline + (1 - o.baseline_momentum) * mean_reward;
        }
        // Weighted by this shard's share of the tokens, the summed gradients are the gradient
        // of the global batch's mean loss: the same step a single process would take.
        if (dist)
          objective =
              objective * (static_cast<double>(local_tokens) / std::max<int64_t>(global_tokens, 1));
        objective.backward();
      }
      if (reducer) reducer->finish();
      if (o.clip > 0) clip_grad_norm(model->parameters(), o.clip);
      adam_step(optimizer);
      ++p.step;
      ++result.steps;
      const double l = loss.defined() ? loss.item<double>() : 0.0;  // this rank's share
      loss_sum += l * batch_tokens;
      loss_tokens += batch_tokens;
      tokens_done += global_tokens;
      epoch_tokens += global_tokens;
      const double elapsed = seconds_since(epoch_started);
      const double rate = epoch_tokens / std::max(elapsed, 1e-9);
      const double eta = elapsed / (p.batch + 1) * (batches.size() - p.batch - 1);
      progress.update(p.epoch, o.epochs, p.batch, batches.size(), rate, l, eta);
      epochs_done = p.epoch + static_cast<double>(p.batch + 1) / batches.size();
      if (main_rank && o.checkpoint_every > 0 && p.step % o.checkpoint_every == 0) {
        Position next = p;
        ++next.batch;
        save_checkpoint(checkpoint, model, optimizer, next);
      }
    }
    progress.end_line();
    result.last_train_loss = loss_tokens ? loss_sum / loss_tokens : 0;
    if (stop) break;

    // End of epoch: rank 0 validates, keeps the best, adapts the learning rate and decides
    // whether to stop; the other ranks follow its decisions.
    bool early = false;
    if (main_rank) {
      const auto [valid_loss, bleu] = validate();
      // Without validation data there is nothing to compare: keep the latest weights, never decay.
      const bool validated = !data.valid.empty() || !data.valid_sources.empty();
      const bool better = !validated || bleu > p.best_bleu + 1e-9 ||
                          (bleu == p.best_bleu && valid_loss < p.best_loss);
      if (better || !fs::exists(best_path)) seq2seq::save_weights(model, best_path);
      if (better) {
        p.best_bleu = bleu;
        p.best_loss = std::min(p.best_loss, valid_loss);
        p.bad_epochs = p.bad_lr_epochs = 0;
      } else {
        ++p.bad_epochs;
        if (++p.bad_lr_epochs > o.lr_patience) {
          p.lr *= o.lr_decay;
          p.bad_lr_epochs = 0;
        }
      }
      early = o.early_stop > 0 && p.bad_epochs >= o.early_stop;
      const double tps = epoch_tokens / std::max(seconds_since(epoch_started), 1e-9);
      nlohmann::json line = {{"epoch", p.epoch + 1},
                             {"step", p.step},
                             {"train_loss", result.last_train_loss},
                             {"valid_loss", valid_loss},
                             {"valid_bleu", bleu},
                             {"lr", p.lr},
                             {"target_tokens_per_s", tps},
                             {"elapsed_s", seconds_since(started)},
                             {"best", better},
                             {"ranks", world}};
      log << line.dump() << "\n" << std::flush;
      if (o.progress)
        std::fprintf(stderr, "epoch %lld: train loss %.4f, valid loss %.4f, valid BLEU %.2f%s\n",
                     static_cast<long long>(p.epoch + 1), result.last_train_loss, valid_loss, bleu,
                     better ? " (best)" : "");
    }
    if (dist) {
      auto decided = dist->broadcast({p.lr, early ? 1.0 : 0.0});
      p.lr = decided[0];
      early = decided[1] > 0;
    }
    set_lr(optimizer, p.lr);
    ++result.epochs_done;
    if (main_rank) {
      Position next = p;
      ++next.epoch;
      next.batch = 0;
      save_checkpoint(checkpoint, model, optimizer, next);
    }
    if (early) {
      result.stopped_because = "early stopping";
      ++p.epoch;
      break;
    }
  }
  if (stop && main_rank) {
    save_checkpoint(checkpoint, model, optimizer, p);
    // Without validation the latest weights are the best we know of. With it, a run cut short
    // by its time limit or by Ctrl-C validates its last weights too, so the partial epoch's
    // work is not lost; the checkpoint's own record of the best is left alone, so a resumed
    // run makes the decisions an uninterrupted one would.
    const bool validated = !data.valid.empty() || !data.valid_sources.empty();
    if (!validated || !fs::exists(best_path)) {
      seq2seq::save_weights(model, best_path);
    } else if (result.stopped_because != "max steps" && p.batch > 0) {
      const auto [valid_loss, bleu] = validate();
      const bool better =
          bleu > p.best_bleu + 1e-9 || (bleu == p.best_bleu && valid_loss < p.best_loss);
      if (better) seq2seq::save_weights(model, best_path);
      log << nlohmann::json{{"epoch", epochs_done}, {"step", p.step}, {"valid_loss", valid_loss},
                            {"valid_bleu", bleu},   {"best", better}, {"final", true}}
                 .dump()
          << "\n"
          << std::flush;
      if (better) p.best_bleu = bleu;
      if (o.progress)
        std::fprintf(stderr, "stopped mid-epoch: valid loss %.4f, valid BLEU %.2f%s\n", valid_loss,
                     bleu, better ? " (best)" : "");
    }
  }
  if (result.stopped_because.empty()) result.stopped_because = "epochs";
  std::signal(SIGINT, previous_handler);
  result.best_valid_bleu = p.best_bleu;
  result.best_valid_loss = p.best_loss;
  result.train_seconds = seconds_since(started);
  result.target_tokens_per_second = tokens_done / std::max(result.train_seconds, 1e-9);
  return result;
}

}  // namespace attnkit::train
