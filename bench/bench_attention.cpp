// Google Benchmark cases for the attention library. bench/compare_pytorch.py runs this binary
// and the same calls in PyTorch (Python) in one run, and prints the ratio table.
//
//   Attention/<score>/<weighting>/step   decoder step: Tq = 1, keys projected once beforehand
//   Attention/<score>/<weighting>/seq    full sequence: Tq = Tk = 50
//   (B = 64, Tk = 50, D = 256)
//   SDPA/fwd, SDPA/fwdbwd                scaled-dot self-attention, [B*H = 16, T = 512, d = 64]
//   Kernel/<fused|composite>/<fwd|fwdbwd>  the fused attention kernel and its composite, the same
//   ShortAttention/<fused|composite>/... the same at a Transformer batch's shape: [256, 12, 64],
//                                        causal
//   Multihead/fwd                        MultiheadAttention(512, 8 heads), B = 2, T = 512
//   Loss/<fused|composite>/fwdbwd        label-smoothed cross-entropy, [768, 2782] logits
//   Decoder/<sequence|steps>/fwdbwd      the training decoder, B = 64, S = T = 12, GRU 256,
//                                        Bahdanau attention, input feeding: as one node
//                                        (kernels/attention_decoder.h) or step by step
//   Encoder/fwdbwd                       the benchmark model's encoder (bidirectional GRU 256,
//                                        B = 64, S = 4 .. 12), forward and backward
//   BeamRanking/32x5x2784/<random|by_frequency>  one beam step's choice of extensions: 32
//                                        sentences of 5 beams, logits N(0, 9) over 2784 tokens
//                                        (by_frequency: minus 2 log(1 + id)), 10 wanted each
//   Backward/<dX|dW>/<packed|in_place>/512x<in>x<out>  a training step's backward products on
//                                        one thread, B packed per call or read where it lies
//   Forward/512x<in>x<out>              a training step's forward product, W packed per call, on
//                                        the configured threads
//   LinearBackward/512x<in>x<out>       its backward pass: dX, dW and the bias's gradient in one
//                                        call, on the configured threads
//   Linear/<float|int8>/<M>x<K>x<N>      y = x W^T at the decoding shapes on one thread: the
//                                        float packed panels against the int8 ones (activations
//                                        quantized in the loop)
//   FmaPeak                              the cores' multiply-add ceiling: independent vector
//                                        FMAs (zmm on AVX-512, ymm on AVX2), no memory, on every
//                                        configured thread at once; the denominator of "the
//                                        products' fraction of the peak"
//   StepProducts/<M>                     a Transformer decoder step's 19 products in order
//                                        (3 layers, d 256, FFN 1024, output layer 2784) on one
//                                        thread, M rows, every weight its own: the rate a search's
//                                        products can reach with their weights streamed from L3
//
// Threads: --threads=N (default 1), the same value the Python side uses.

#include <ATen/ATen.h>
#include <benchmark/benchmark.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/grad_mode.h>

#include <immintrin.h>

#include <array>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "attnkit/attention/attention.h"
#include "attnkit/attention/functional.h"
#include "attnkit/attention/mask.h"
#include "attnkit/attention/self_attention.h"
#include "attnkit/core/info.h"
#include "attnkit/kernels/gemm/matmul.h"
#include "attnkit/kernels/ops/fused_attention.h"
#include "attnkit/kernels/ops/loss.h"
#include "attnkit/kernels/ops/top_k.h"
#include "attnkit/rnn/model.h"
#include "attnkit/train/step.h"
#include "kernels/gemm/int8_gemm.h"
#include "kernels/gemm/packed_gemm.h"
#include "kernels/gemm/products.h"

namespace {

using namespace attnkit;

constexpr int64_t kBatch = 64, kLen = 50, kDim = 256;

void attention_case(benchmark::State& state, ScoreKind score, WeightingKind weighting, bool step) {
  at::manual_seed(0);
  Attention attn(AttentionOptions(kDim, kDim).score(score).weighting(weighting));
  attn->eval();
  torch::NoGradGuard no_grad;
  auto q = at::randn({kBatch, step ? 1 : kLen, kDim});
  auto k = at::randn({kBatch, kLen, kDim}), v = at::randn({kBatch, kLen, kDim});
  auto keys = attn->project_keys(k);
  for (auto _ : state) {
    auto r = step ? attn->attend(q, keys, v) : attn->forward(q, k, v);
    benchmark::DoNotOptimize(r.output.data_ptr());
  }
  state.SetItemsProcessed(state.iterations() * kBatch * q.size(1));
}

void sdpa_case(benchmark::State& state, bool backward) {
  at::manual_seed(0);
  auto q = at::randn({16, 512, 64}).requires_grad_(backward);
  auto k = at::randn({16, 512, 64}).requires_grad_(backward);
  auto v = at::randn({16, 512, 64}).requires_grad_(backward);
  at::AutoGradMode grad_mode(backward);
  for (auto _ : state) {
    auto [out, w] = functional::scaled_dot_product_attention(q, k, v);
    if (backward) out.sum().backward();
    benchmark::DoNotOptimize(out.data_ptr());
  }
}

void multihead_case(benchmark::State& state) {
  at::manual_seed(0);
  MultiheadAttention mha(MultiheadAttentionOptions(512, 8));
  torch::NoGradGuard no_grad;
  auto x = at::randn({2, 512, 512});
  for (auto _ : state) {
    auto r = mha->forward(x, x, x);
    benchmark::DoNotOptimize(r.output.data_ptr());
  }
}

// The fused kernel against the composite path it replaces, on the same inputs: N = B x H rows
// of T positions, causal or not.
void attention_kernel(benchmark::State& state, int64_t n, int64_t t, bool causal, bool fused,
                      bool backward) {
  const int64_t d = 64;
  at::manual_seed(0);
  const auto mask = causal ? at::ones({1, t, t}, at::kBool).tril() : at::Tensor();
  auto q = at::randn({n, t, d}).requires_grad_(backward),
       k = at::randn({n, t, d}).requires_grad_(backward),
       v = at::randn({n, t, d}).requires_grad_(backward);
  at::AutoGradMode grad_mode(backward);
  for (auto _ : state) {
    auto out = fused ? kernels::fused_attention(q, k, v, mask)
                     : functional::scaled_dot_product_attention(q, k, v, mask).first;
    if (backward) out.sum().backward();
    benchmark::DoNotOptimize(out.data_ptr());
  }
  // Nominal attention FLOPs: 4 N T^2 d forward; backward counted as 2.5x forward.
  const double flops = 4.0 * n * t * t * d * (backward ? 3.5 : 1.0);
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops * state.iterations() / 1e9, benchmark::Counter::kIsRate);
}

void kernel_case(benchmark::State& state, bool fused, bool backward) {
  attention_kernel(state, /*n=*/16, /*t=*/512, /*causal=*/false, fused, backward);
}

// A Transformer training batch's self-attention: 64 sentences x 4 heads, 12 positions, causal.
void short_kernel_case(benchmark::State& state, bool fused, bool backward) {
  attention_kernel(state, /*n=*/256, /*t=*/12, /*causal=*/true, fused, backward);
}

// The training loss over a batch's logits (64 sentences x 12 steps, the benchmark corpus's target
// vocabulary), forward and backward: the fused kernel against LibTorch's composite.
void loss_case(benchmark::State& state, bool fused) {
  auto logits = at::randn({64 * 12, 2782}).requires_grad_();
  auto target = at::randint(1, 2782, {64 * 12}, at::kLong);
  for (auto _ : state) {
    auto loss =
        train::sequence_loss(logits.view({64, 12, 2782}), target.view({64, 12}), 0.1, fused);
    loss.backward();
    benchmark::DoNotOptimize(logits.grad().data_ptr());
    logits.mutable_grad() = at::Tensor();
  }
}

// The output layer fused with the loss (kernels::linear_cross_entropy) on a training batch's real
// target tokens: forward alone, or forward and backward.
void linear_loss_case(benchmark::State& state, bool backward) {
  at::manual_seed(0);
  const int64_t N = 512, K = 256, V = 2782;
  auto x = at::randn({N, K}).requires_grad_();
  auto w = (at::randn({V, K}) * 0.05).requires_grad_(), b = at::zeros({V}).requires_grad_();
  const auto target = at::randint(1, V, {N}, at::kLong);
  for (auto _ : state) {
    auto loss = kernels::linear_cross_entropy(x, w, b, target, 0.1, 0).mean();
    if (backward) torch::autograd::grad({loss}, {x, w, b});
    benchmark::DoNotOptimize(loss.data_ptr());
  }
}

// The benchmark model's decoder under teacher forcing, forward and backward up to the
// attentional vectors (the output layer and loss are the same either way).
void decoder_case(benchmark::State& state, bool sequence) {
  at::manual_seed(0);
  const int64_t B = 64, S = 12, T = 12;
  rnn::Decoder decoder(rnn::RnnOptions(4690, 2782));
  auto lengths = at::randint(4, S + 1, {B}, at::kLong);
  rnn::EncoderOutput encoded{at::randn({B, S, 512}).requires_grad_(), padding_mask(lengths, S),
                             at::randn({1, B, 256}).requires_grad_(), at::Tensor()};
  auto tokens = at::randint(4, 2782, {B, T}, at::kLong);
  for (auto _ : state) {
    auto s = decoder->start(encoded);
    auto in = decoder->force_inputs(tokens);
    at::Tensor feeds;  // [B, T, H]
    if (sequence) {
      feeds = decoder->forced_sequence(in, s).first;
    } else {
      in.gates = in.all_gates.unbind(1);
      std::vector<at::Tensor> steps;
      for (int64_t t = 0; t < T; ++t) steps.push_back(decoder->forced_step(in, t, s).feed);
      feeds = at::cat(steps, 1);
    }
    feeds.sum().backward();
    benchmark::DoNotOptimize(encoded.memory.grad().data_ptr());
    train::clear_gradients(decoder->parameters());
    encoded.memory.mutable_grad() = at::Tensor();
    encoded.state.mutable_grad() = at::Tensor();
  }
}

// The benchmark model's encoder on a batch of 64 sources of 4 .. 12 tokens, forward and backward.
void encoder_case(benchmark::State& state) {
  at::manual_seed(0);
  const int64_t B = 64, S = 12;
  rnn::Encoder encoder(rnn::RnnOptions(4690, 2782));
  auto lengths = at::randint(4, S + 1, {B}, at::kLong);
  auto source = at::randint(4, 4690, {B, S}, at::kLong);
  for (auto _ : state) {
    auto e = encoder->forward(source, lengths);
    (e.memory.sum() + e.state.sum()).backward();
    benchmark::DoNotOptimize(encoder->embedding->weight.grad().data_ptr());
    train::clear_gradients(encoder->parameters());
  }
}

// The machine's matrix-multiply throughput, measured in the same run as the kernels.
void sgemm_case(benchmark::State& state) {
  const int64_t size = 1024;
  auto a = at::randn({size, size}), b = at::randn({size, size});
  for (auto _ : state) benchmark::DoNotOptimize(at::mm(a, b).data_ptr());
  state.counters["GFLOP/s"] = benchmark::Counter(
      2.0 * size * size * size * state.iterations() / 1e9, benchmark::Counter::kIsRate);
}

// The same product on attnkit's packed blocks (AVX-512 where the CPU has it), both operands packed
// per call as a one-off product would, rows split between the configured threads.
void packed_gemm_case(benchmark::State& state) {
  const int64_t size = 1024;
  auto a = at::randn({size, size}), b = at::randn({size, size}), c = at::empty({size, size});
  for (auto _ : state) {
    kernels::matmul(a, b, c);
    benchmark::DoNotOptimize(c.data_ptr());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(
      2.0 * size * size * size * state.iterations() / 1e9, benchmark::Counter::kIsRate);
}

// `iterations` rounds of 24 independent FMA chains (more than the 2 units x 4 cycles of latency
// in flight that full speed needs); returns a sum so the loop is kept. 2 x 16 x 24 FLOPs a round.
__attribute__((target("avx512f"))) float fma_chains_avx512(int64_t iterations) {
  __m512 acc[24];
  for (int i = 0; i < 24; ++i) acc[i] = _mm512_set1_ps(1e-3f * i);
  const __m512 a = _mm512_set1_ps(0.999f), b = _mm512_set1_ps(1e-4f);
  for (int64_t it = 0; it < iterations; ++it)
#pragma GCC unroll 24
    for (int i = 0; i < 24; ++i) acc[i] = _mm512_fmadd_ps(acc[i], a, b);
  float sum = 0;
  for (int i = 0; i < 24; ++i) sum += _mm512_reduce_add_ps(acc[i]);
  return sum;
}

// The same on ymm registers (2 x 8 x 12 FLOPs a round: 12 chains of the 16 registers).
__attribute__((target("avx2,fma"))) float fma_chains_avx2(int64_t iterations) {
  __m256 acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm256_set1_ps(1e-3f * i);
  const __m256 a = _mm256_set1_ps(0.999f), b = _mm256_set1_ps(1e-4f);
  for (int64_t it = 0; it < iterations; ++it)
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) acc[i] = _mm256_fmadd_ps(acc[i], a, b);
  alignas(32) float lanes[8];
  float sum = 0;
  for (int i = 0; i < 12; ++i) {
    _mm256_store_ps(lanes, acc[i]);
    for (float v : lanes) sum += v;
  }
  return sum;
}

// The multiply-add ceiling of the configured threads' cores, all at once (the slowest sets the
// pace, as it does for a product split between them). Why: "fraction of the peak" against the
// 1024^3 SGEMM understates how close a product comes to the hardware: on an AMD Zen 5 (218
// GFLOP/s a core) the packed block runs a training step's products at 84-95 % of this ceiling and
// the 1024^3 product at 76-83 % (bench/compare_transformer.py reports both).
void fma_peak_case(benchmark::State& state) {
  const bool avx512 = kernels::cpu_isa() == kernels::Isa::Avx512;
  if (!avx512 && kernels::cpu_isa() != kernels::Isa::Avx2) {
    state.SkipWithError("FmaPeak: no AVX2 or AVX-512 on this CPU");
    return;
  }
  const int64_t threads = std::max<int64_t>(1, configured_threads()), rounds = 20'000'000;
  const double flops_per_thread = avx512 ? 2.0 * 16 * 24 * rounds : 2.0 * 8 * 12 * rounds;
  std::vector<float> sums(threads);
  auto run = [&](int64_t t) {
    sums[t] = avx512 ? fma_chains_avx512(rounds) : fma_chains_avx2(rounds);
  };
  for (auto _ : state) {
    std::vector<std::thread> others;
    for (int64_t t = 1; t < threads; ++t) others.emplace_back(run, t);
    run(0);
    for (auto& other : others) other.join();
    benchmark::DoNotOptimize(sums.data());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(
      flops_per_thread * threads * state.iterations() / 1e9, benchmark::Counter::kIsRate);
}

// The float packed product against the int8 one at a decoding shape (one thread, the rows of x
// quantized inside the timed loop, as a decoder step would).
void linear_case(benchmark::State& state, bool int8, int64_t m, int64_t k, int64_t n) {
  auto w = at::randn({n, k}) * 0.1, x = at::randn({m, k}), y = at::empty({m, n});
  const auto floats = kernels::packed::Panels<float>::transposed(  // as kernels::PackedLinear packs
      w.data_ptr<float>(), n, k, k,
      {/*scale=*/1, /*parts=*/1, kernels::cpu_isa(), /*streamed=*/true});
  const auto bytes = kernels::int8::Panels::quantize(w.data_ptr<float>(), n, k, k);
  for (auto _ : state) {
    if (int8)
      bytes.multiply(x.data_ptr<float>(), m, /*ldx=*/k, /*bias=*/nullptr, y.data_ptr<float>(),
                     /*ldy=*/n);
    else
      floats.multiply(x.data_ptr<float>(), m, /*ldx=*/k, y.data_ptr<float>(), /*ldy=*/n,
                      /*accumulate=*/false);
    benchmark::DoNotOptimize(y.data_ptr());
  }
  state.counters["GOP/s"] =
      benchmark::Counter(2.0 * m * k * n * state.iterations() / 1e9, benchmark::Counter::kIsRate);
}

// A Transformer decoder step's products in order on one thread (3 layers: q/k/v, out, cross q,
// cross out, FFN in, FFN out; then the output layer), M rows each, every weight its own: 13.6 MB
// of panels, more than a core's L2, as a search streams them step after step. Against
// Linear/float/*, what streaming the weights costs; against a search's own products (timed in
// place), what the search's surroundings cost them.
void step_products_case(benchmark::State& state, int64_t m) {
  const int64_t D = 256, F = 1024, V = 2784;
  std::vector<std::array<int64_t, 2>> shapes;  // [out, in]
  for (int l = 0; l < 3; ++l)
    for (auto s :
         std::vector<std::array<int64_t, 2>>{{3 * D, D}, {D, D}, {D, D}, {D, D}, {F, D}, {D, F}})
      shapes.push_back(s);
  shapes.push_back({V, D});
  std::vector<kernels::packed::Panels<float>> panels;
  double flops = 0;
  for (auto [out, in] : shapes) {
    auto w = at::randn({out, in}) * 0.1;
    panels.push_back(kernels::packed::Panels<float>::transposed(  // as kernels::PackedLinear packs
        w.data_ptr<float>(), out, in, in,
        {/*scale=*/1, /*parts=*/1, kernels::cpu_isa(), /*streamed=*/true}));
    flops += 2.0 * m * out * in;
  }
  auto x = at::randn({m, F}), y = at::empty({m, V});
  for (auto _ : state) {
    for (const auto& p : panels)
      p.multiply(x.data_ptr<float>(), m, /*ldx=*/p.k(), y.data_ptr<float>(), /*ldy=*/p.n(),
                 /*accumulate=*/false);
    benchmark::DoNotOptimize(y.data_ptr());
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops * state.iterations() / 1e9, benchmark::Counter::kIsRate);
}

// A training step's backward products on one thread, B packed per call (as linear_backward did)
// or read where it lies: dX = dY W (B = W [out, in]) and dW = dY^T X (B = X [rows, in], dY^T read
// down its columns).
void backward_product_case(benchmark::State& state, bool weight, bool in_place, int64_t rows,
                           int64_t in, int64_t out) {
  using kernels::packed::Panels;
  auto w = at::randn({out, in}), x = at::randn({rows, in}), dy = at::randn({rows, out});
  auto c = weight ? at::empty({out, in}) : at::empty({rows, in});
  for (auto _ : state) {
    if (weight) {
      const auto b = in_place ? Panels<float>::in_place(x.data_ptr<float>(), rows, in, in)
                              : Panels<float>::plain(x.data_ptr<float>(), rows, in, in);
      b.multiply(dy.data_ptr<float>(), out, /*ldx=*/1, c.data_ptr<float>(), /*ldy=*/in,
                 /*accumulate=*/false, /*kstride=*/out);
    } else {
      const auto b = in_place ? Panels<float>::in_place(w.data_ptr<float>(), out, in, in)
                              : Panels<float>::plain(w.data_ptr<float>(), out, in, in);
      b.multiply(dy.data_ptr<float>(), rows, /*ldx=*/out, c.data_ptr<float>(), /*ldy=*/in,
                 /*accumulate=*/false);
    }
    benchmark::DoNotOptimize(c.data_ptr());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * rows * in * out * state.iterations() / 1e9,
                                                 benchmark::Counter::kIsRate);
}

// A training step's forward product y = b + x W^T (products::affine: W packed as it is multiplied,
// on the configured threads).
void forward_product_case(benchmark::State& state, int64_t rows, int64_t in, int64_t out) {
  auto w = at::randn({out, in}), x = at::randn({rows, in}), b = at::randn({out}),
       y = at::empty({rows, out});
  for (auto _ : state) {
    kernels::products::affine(x.data_ptr<float>(), rows, in, w.data_ptr<float>(), out,
                              b.data_ptr<float>(), y.data_ptr<float>());
    benchmark::DoNotOptimize(y.data_ptr());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * rows * in * out * state.iterations() / 1e9,
                                                 benchmark::Counter::kIsRate);
}

// A training step's backward pass of y = b + x W^T (products::linear_backward: dX, dW and db in
// one hand-off, on the configured threads).
void linear_backward_case(benchmark::State& state, int64_t rows, int64_t in, int64_t out) {
  auto w = at::randn({out, in}), x = at::randn({rows, in}), dy = at::randn({rows, out});
  auto dx = at::empty({rows, in}), dw = at::empty({out, in}), db = at::empty({out});
  for (auto _ : state) {
    kernels::products::linear_backward(
        dy.data_ptr<float>(), rows, in, out, x.data_ptr<float>(), w.data_ptr<float>(), /*ldw=*/in,
        /*alpha=*/1.f, dx.data_ptr<float>(), dw.data_ptr<float>(), db.data_ptr<float>());
    benchmark::DoNotOptimize(dw.data_ptr());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(4.0 * rows * in * out * state.iterations() / 1e9,
                                                 benchmark::Counter::kIsRate);
}

void beam_ranking_case(benchmark::State& state, bool by_frequency) {
  at::manual_seed(0);
  const int64_t sentences = 32, k = 5, vocab = 2784, want = 2 * k;
  auto logits = at::randn({sentences * k, vocab}) * 3;
  // Vocabularies number tokens by frequency: the low ids' logits are larger on the whole.
  if (by_frequency) logits -= 2 * at::log1p(at::arange(vocab, at::kFloat));
  logits = logits.contiguous();
  auto scores = (at::randn({sentences * k}, at::kDouble) * 2).contiguous();
  for (auto _ : state)
    benchmark::DoNotOptimize(kernels::best_extensions(logits.data_ptr<float>(), sentences, k, vocab,
                                                      scores.data_ptr<double>(), want));
}

void register_all() {
  for (auto score : {ScoreKind::Concat, ScoreKind::Additive, ScoreKind::Bahdanau,
                     ScoreKind::ScaledDot, ScoreKind::Dot, ScoreKind::General})
    for (auto weighting : {WeightingKind::Soft, WeightingKind::Hard, WeightingKind::Local})
      for (bool step : {true, false}) {
        const std::string name = "Attention/" + to_string(score) + "/" + to_string(weighting) +
                                 (step ? "/step" : "/seq");
        benchmark::RegisterBenchmark(name.c_str(), attention_case, score, weighting, step)
            ->Unit(benchmark::kMicrosecond);
      }
  benchmark::RegisterBenchmark("SDPA/fwd", sdpa_case, false)->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("SDPA/fwdbwd", sdpa_case, true)->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("Multihead/fwd", multihead_case)->Unit(benchmark::kMillisecond);
  for (bool backward : {false, true})
    for (bool fused : {false, true})
      benchmark::RegisterBenchmark((std::string("Kernel/") + (fused ? "fused" : "composite") +
                                    (backward ? "/fwdbwd" : "/fwd"))
                                       .c_str(),
                                   kernel_case, fused, backward)
          ->Unit(benchmark::kMillisecond);
  for (bool backward : {false, true})
    for (bool fused : {false, true})
      benchmark::RegisterBenchmark(
          (std::string("ShortAttention/") + (fused ? "fused" : "composite") +
           (backward ? "/fwdbwd" : "/fwd"))
              .c_str(),
          short_kernel_case, fused, backward)
          ->Unit(benchmark::kMicrosecond);
  for (bool backward : {false, true})
    benchmark::RegisterBenchmark(backward ? "LinearLoss/fwdbwd" : "LinearLoss/fwd",
                                 linear_loss_case, backward)
        ->Unit(benchmark::kMillisecond);
  for (bool fused : {false, true})
    benchmark::RegisterBenchmark(fused ? "Loss/fused/fwdbwd" : "Loss/composite/fwdbwd", loss_case,
                                 fused)
        ->Unit(benchmark::kMillisecond);
  for (bool sequence : {true, false})
    benchmark::RegisterBenchmark(sequence ? "Decoder/sequence/fwdbwd" : "Decoder/steps/fwdbwd",
                                 decoder_case, sequence)
        ->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("Encoder/fwdbwd", encoder_case)->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("Sgemm/1024", sgemm_case)->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("PackedGemm/1024", packed_gemm_case)->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("FmaPeak", fma_peak_case)->Unit(benchmark::kMillisecond);
  for (bool by_frequency : {false, true})
    benchmark::RegisterBenchmark(
        by_frequency ? "BeamRanking/32x5x2784/by_frequency" : "BeamRanking/32x5x2784/random",
        beam_ranking_case, by_frequency)
        ->Unit(benchmark::kMicrosecond);
  for (auto [in, out] : std::vector<std::array<int64_t, 2>>{
           {256, 768}, {256, 256}, {256, 1024}, {1024, 256}, {256, 2784}}) {
    const std::string shape = "512x" + std::to_string(in) + "x" + std::to_string(out);
    benchmark::RegisterBenchmark(("Forward/" + shape).c_str(), forward_product_case, 512, in, out)
        ->Unit(benchmark::kMicrosecond);
    benchmark::RegisterBenchmark(("LinearBackward/" + shape).c_str(), linear_backward_case, 512, in,
                                 out)
        ->Unit(benchmark::kMicrosecond);
  }
  for (bool weight : {false, true})
    for (auto [in, out] :
         std::vector<std::array<int64_t, 2>>{{256, 768}, {256, 256}, {256, 1024}, {1024, 256}})
      for (bool in_place : {false, true})
        benchmark::RegisterBenchmark(("Backward/" + std::string(weight ? "dW/" : "dX/") +
                                      (in_place ? "in_place/" : "packed/") + "512x" +
                                      std::to_string(in) + "x" + std::to_string(out))
                                         .c_str(),
                                     backward_product_case, weight, in_place, 512, in, out)
            ->Unit(benchmark::kMicrosecond);
  for (int64_t m : {8, 32, 64, 160})
    benchmark::RegisterBenchmark(("StepProducts/" + std::to_string(m)).c_str(), step_products_case,
                                 m)
        ->Unit(benchmark::kMicrosecond);
  // A greedy step's projections and output layer, a beam step's (5 beams x 32), a training-size
  // block.
  for (auto [m, k, n] : std::vector<std::array<int64_t, 3>>{
           {1, 256, 768}, {1, 256, 2784}, {64, 256, 768}, {160, 256, 2784}})
    for (bool int8 : {false, true})
      benchmark::RegisterBenchmark(
          ("Linear/" + std::string(int8 ? "int8/" : "float/") + std::to_string(m) + "x" +
           std::to_string(k) + "x" + std::to_string(n))
              .c_str(),
          linear_case, int8, m, k, n)
          ->Unit(benchmark::kMicrosecond);
}

}  // namespace

int main(int argc, char** argv) {
  // --threads=N, --blas (ThreadPolicy::Blas) and --kernels (ThreadPolicy::Kernels) are ours;
  // take them out before Google Benchmark parses the rest.
  int threads = 1;
  auto policy = attnkit::ThreadPolicy::IntraOp;
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--threads=", 10) == 0)
      threads = std::stoi(argv[i] + 10);
    else if (std::strcmp(argv[i], "--blas") == 0)
      policy = attnkit::ThreadPolicy::Blas;
    else if (std::strcmp(argv[i], "--kernels") == 0)
      policy = attnkit::ThreadPolicy::Kernels;
    else
      argv[kept++] = argv[i];
  }
  argc = kept;
  attnkit::tune_allocator();
  attnkit::set_threads(threads, policy);
  register_all();
  benchmark::Initialize(&argc, argv);
  benchmark::ReportUnrecognizedArguments(argc, argv);
  benchmark::AddCustomContext("threads", std::to_string(threads));
  benchmark::AddCustomContext("blas", attnkit::detect_blas().name);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
