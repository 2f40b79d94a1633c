// Where a training step's time goes: runs one of the benchmark models on random batches shaped as
// the zh_CN gettext corpus gives them (batch 64, up to 12 tokens a side, its vocabularies) and
// writes LibTorch's per-op trace (chrome://tracing JSON). bench/profile_ops.py sums it by op.
//   attnkit_profile_training trace.json [threads] [rnn|transformer]
// rnn: GRU 256, embed 128, Bahdanau attention, input feeding (the GRU model of
// docs/PERFORMANCE.md). transformer: 3+3 layers, d_model 256, 4 heads, FFN 1024, pre-norm, tied
// output (the Transformer of docs/PERFORMANCE.md), the loss as TransformerTrainable computes it.

#include <ATen/ATen.h>
#include <ATen/record_function.h>
#include <torch/csrc/autograd/profiler_legacy.h>
#include <torch/optim/adam.h>

#include <functional>
#include <iostream>
#include <string>

#include "attnkit/core/info.h"
#include "attnkit/rnn/model.h"
#include "attnkit/train/step.h"
#include "attnkit/transformer/model.h"

namespace {

constexpr int64_t B = 64, S = 12, T = 12, V_src = 4690, V_tgt = 2782;

struct Batch {
  at::Tensor source, lengths, target_in, target_out, real;  // real: target_out != <pad>
};

Batch random_batch() {
  Batch b;
  b.lengths = at::randint(4, S + 1, {B}, at::kLong);
  b.source = at::randint(4, V_src, {B, S}, at::kLong);
  b.source.masked_fill_(at::arange(S, at::kLong).unsqueeze(0) >= b.lengths.unsqueeze(1), 0);
  // Targets of 4 .. T tokens padded to T, as batches sorted by source length have them.
  auto target = at::randint(4, V_tgt, {B, T + 1}, at::kLong);
  auto target_lengths = at::randint(4, T + 1, {B, 1}, at::kLong);
  target.masked_fill_(at::arange(T + 1, at::kLong).unsqueeze(0) > target_lengths, 0);
  b.target_in = target.narrow(1, 0, T);
  b.target_out = target.narrow(1, 1, T);
  b.real = b.target_out != 0;
  return b;
}

// The loss of one batch (under a "step: forward" span) and the model's parameters.
struct Profiled {
  std::vector<at::Tensor> parameters;
  std::function<at::Tensor(const Batch&)> loss;
};

Profiled rnn() {
  attnkit::rnn::RnnModel model(attnkit::rnn::RnnOptions(V_src, V_tgt));
  return {model->parameters(), [model](const Batch& b) mutable {
            auto out = model->forward(b.source, b.lengths, b.target_in, 1.0, b.real,
                                      attnkit::rnn::Head::Features);
            return attnkit::train::projected_loss(out.features, model->decoder->output->weight,
                                                  model->decoder->output->bias,
                                                  b.target_out.masked_select(b.real), 0.1);
          }};
}

Profiled transformer() {
  attnkit::transformer::TransformerModel model(
      attnkit::transformer::TransformerOptions(V_src, V_tgt));
  return {model->parameters(), [model](const Batch& b) mutable {
            const auto ragged = attnkit::kernels::Ragged::from_mask(b.real);
            auto features = model->decode(b.target_in, model->encode(b.source, b.lengths),
                                          /*maps=*/nullptr, &ragged);
            return attnkit::train::projected_loss(
                features, model->output_weight(), model->output_bias(),
                attnkit::kernels::unpad(b.target_out, ragged), 0.1);
          }};
}

}  // namespace

int main(int argc, char** argv) {
  const std::string arch = argc > 3 ? argv[3] : "rnn";
  if (argc < 2 || (arch != "rnn" && arch != "transformer")) {
    std::cerr << "usage: attnkit_profile_training trace.json [threads] [rnn|transformer]\n";
    return 2;
  }
  attnkit::tune_allocator();
  attnkit::set_threads(argc > 2 ? std::stoi(argv[2]) : 0, attnkit::ThreadPolicy::Kernels);
  at::manual_seed(0);
  auto profiled = arch == "rnn" ? rnn() : transformer();
  torch::optim::Adam optimizer(profiled.parameters, torch::optim::AdamOptions(1e-3));
  // Each phase is a named span in the trace: its self time is what no traced op covers (work
  // in custom autograd functions' forward passes, and the autograd engine's own bookkeeping).
  auto phase = [](const char* name, const auto& fn) {
    RECORD_FUNCTION(name, std::vector<c10::IValue>());
    fn();
  };
  auto step = [&] {
    const auto batch = random_batch();
    attnkit::train::clear_gradients(profiled.parameters);
    at::Tensor loss;
    phase("step: forward", [&] { loss = profiled.loss(batch); });
    phase("step: backward", [&] { loss.backward(); });
    phase("step: clip", [&] { attnkit::train::clip_grad_norm(profiled.parameters, 1.0); });
    phase("step: adam", [&] { attnkit::train::adam_step(optimizer); });
  };
  for (int i = 0; i < 3; ++i) step();
  {
    torch::autograd::profiler::RecordProfile guard(argv[1]);
    for (int i = 0; i < 5; ++i) step();
  }
  return 0;
}
