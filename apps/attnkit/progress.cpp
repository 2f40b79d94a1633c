#include "progress.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <string>

namespace attnkit::cli {
namespace {

std::string clock_text(double s) {
  char buf[32];
  const int t = static_cast<int>(s);
  std::snprintf(buf, sizeof buf, "%d:%02d:%02d", t / 3600, t / 60 % 60, t % 60);
  return buf;
}

}  // namespace

TrainProgress::TrainProgress()
    : tty_(isatty(STDERR_FILENO)),
      last_(std::chrono::steady_clock::now() - std::chrono::hours(1)) {}

void TrainProgress::operator()(const train::TrainEvent& e) {
  using Kind = train::TrainEvent::Kind;
  if (e.kind == Kind::Step) return bar(e);
  finish();
  const auto& v = e.validation;
  if (e.kind == Kind::EpochEnd)
    std::fprintf(stderr, "epoch %lld: train loss %.4f, valid loss %.4f, valid BLEU %.2f%s\n",
                 static_cast<long long>(e.epoch + 1), e.loss, v.loss, v.bleu,
                 v.better ? " (best)" : "");
  else if (e.kind == Kind::Validation)
    std::fprintf(stderr, "step %lld: train loss %.4f, valid loss %.4f, valid BLEU %.2f%s\n",
                 static_cast<long long>(e.step), e.loss, v.loss, v.bleu, v.better ? " (best)" : "");
  else
    std::fprintf(stderr, "stopped mid-epoch: valid loss %.4f, valid BLEU %.2f%s\n", v.loss, v.bleu,
                 v.better ? " (best)" : "");
}

void TrainProgress::finish() {
  if (open_line_) std::fprintf(stderr, "\n");
  open_line_ = false;
}

void TrainProgress::bar(const train::TrainEvent& e) {
  const auto now = std::chrono::steady_clock::now();
  const bool last_batch = e.batch + 1 == e.batches;
  if (now - last_ < std::chrono::milliseconds(tty_ ? 250 : 10000) && !last_batch) return;
  last_ = now;
  const size_t batches = std::max<size_t>(e.batches, 1);
  const int width = 24, filled = static_cast<int>(width * (e.batch + 1) / batches);
  std::string bar(filled, '=');
  bar.resize(width, ' ');
  std::fprintf(stderr, "%sepoch %lld/%lld [%s] %3d%% %7.0f tok/s  loss %.3f  ETA %s%s",
               tty_ ? "\r" : "", static_cast<long long>(e.epoch + 1),
               static_cast<long long>(e.epochs), bar.c_str(),
               static_cast<int>(100 * (e.batch + 1) / batches), e.tokens_per_second, e.loss,
               clock_text(e.eta_seconds).c_str(), tty_ ? "\033[K" : "\n");
  std::fflush(stderr);
  open_line_ = tty_;
}

}  // namespace attnkit::cli
