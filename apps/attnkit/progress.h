#pragma once

#include <chrono>

#include "attnkit/train/trainer.h"

namespace attnkit::cli {

// What `attnkit train` shows of a run on stderr (train::TrainOptions::on_event): a one-line
// progress bar, redrawn in place on a terminal and a line every 10 s in a log, and a line per
// validation.
class TrainProgress {
 public:
  TrainProgress();
  void operator()(const train::TrainEvent& event);
  // Ends a bar left open on a terminal.
  void finish();

 private:
  void bar(const train::TrainEvent& event);
  bool tty_;
  std::chrono::steady_clock::time_point last_;
  bool open_line_ = false;  // a bar is drawn without its newline
};

}  // namespace attnkit::cli
