// Where a training step's time goes: runs the benchmark model (GRU 256, embed 128, Bahdanau
// attention, input feeding, batch 64, vocabularies of the zh_CN gettext corpus) on random
// batches and writes LibTorch's per-op trace (chrome://tracing JSON). bench/profile_ops.py
// sums it by op.
//   attnkit_profile_training trace.json [threads]

#include <ATen/ATen.h>
#include <ATen/record_function.h>
#include <torch/csrc/autograd/profiler_legacy.h>
#include <torch/optim/adam.h>

#include <iostream>

#include "attnkit/core/info.h"
#include "attnkit/seq2seq/model.h"
#include "attnkit/train/step.h"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: attnkit_profile_training trace.json [threads]\n";
    return 2;
  }
  attnkit::tune_allocator();
  attnkit::set_threads(argc > 2 ? std::stoi(argv[2]) : 0, attnkit::ThreadPolicy::Kernels);
  at::manual_seed(0);
  const int64_t B = 64, S = 12, T = 12, V_src = 4690, V_tgt = 2782;
  attnkit::seq2seq::Seq2Seq model(attnkit::seq2seq::Seq2SeqOptions(V_src, V_tgt));
  torch::optim::Adam optimizer(model->parameters(), torch::optim::AdamOptions(1e-3));
  // Each phase is a named span in the trace: its self time is what no traced op covers (work
  // in custom autograd functions' forward passes, and the autograd engine's own bookkeeping).
  auto phase = [](const char* name, const auto& fn) {
    RECORD_FUNCTION(name, std::vector<c10::IValue>());
    fn();
  };
  auto step = [&] {
    auto lengths = at::randint(4, S + 1, {B}, at::kLong);
    auto source = at::randint(4, V_src, {B, S}, at::kLong);
    // Targets of 4 .. T tokens padded to T, as batches sorted by source length have them.
    auto target = at::randint(4, V_tgt, {B, T + 1}, at::kLong);
    auto target_lengths = at::randint(4, T + 1, {B, 1}, at::kLong);
    target.masked_fill_(at::arange(T + 1, at::kLong).unsqueeze(0) > target_lengths, 0);
    const auto target_out = target.narrow(1, 1, T), real = target_out != 0;
    attnkit::train::clear_gradients(model->parameters());
    at::Tensor loss;
    phase("step: forward", [&] {
      auto out = model->forward(source, lengths, target.narrow(1, 0, T), 1.0, real,
                                attnkit::seq2seq::Head::Features);
      loss = attnkit::train::projected_loss(out.features, model->decoder->output->weight,
                                            model->decoder->output->bias,
                                            target_out.masked_select(real), 0.1);
    });
    phase("step: backward", [&] { loss.backward(); });
    phase("step: clip", [&] { attnkit::train::clip_grad_norm(model->parameters(), 1.0); });
    phase("step: adam", [&] { attnkit::train::adam_step(optimizer); });
  };
  for (int i = 0; i < 3; ++i) step();
  {
    torch::autograd::profiler::RecordProfile guard(argv[1]);
    for (int i = 0; i < 5; ++i) step();
  }
  return 0;
}
