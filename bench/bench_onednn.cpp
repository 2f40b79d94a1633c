// attnkit's packed products against oneDNN's (Debian's libdnnl 2.6, the library CTranslate2 and
// PyTorch build on for x86) at the shapes attnkit multiplies, one thread each:
//   Packed/MxKxN     attnkit's panels (src/kernels/packed_gemm.h), the weight packed once
//   DnnlSgemm/MxKxN  dnnl_sgemm, row-major, which packs the weight on every call
//   DnnlMatmul/MxKxN a matmul primitive with the weight reordered once into the layout oneDNN
//                    picks ("any"), as a decoder keeps its weights: oneDNN's best case
// y[M, N] = x[M, K] W^T with W [N, K], the nn.Linear layout. Run with OMP_NUM_THREADS=1.
//   attnkit_bench_onednn [--benchmark_filter=...]

#include <ATen/ATen.h>
#include <benchmark/benchmark.h>
#include <dnnl.hpp>

#include <array>
#include <string>
#include <vector>

#include "kernels/gemm/packed_gemm.h"

namespace {

using Shape = std::array<int64_t, 3>;  // M, K, N

void count(benchmark::State& state, const Shape& s) {
  state.counters["GFLOP/s"] = benchmark::Counter(
      2.0 * s[0] * s[1] * s[2] * state.iterations() / 1e9, benchmark::Counter::kIsRate);
}

void packed_case(benchmark::State& state, Shape s) {
  auto x = at::randn({s[0], s[1]}), w = at::randn({s[2], s[1]}), y = at::empty({s[0], s[2]});
  const auto panels =
      attnkit::kernels::packed::Panels<float>::transposed(w.data_ptr<float>(), s[2], s[1], s[1]);
  for (auto _ : state) {
    panels.multiply(x.data_ptr<float>(), s[0], s[1], y.data_ptr<float>(), s[2], false);
    benchmark::DoNotOptimize(y.data_ptr());
  }
  count(state, s);
}

void sgemm_case(benchmark::State& state, Shape s) {
  auto x = at::randn({s[0], s[1]}), w = at::randn({s[2], s[1]}), y = at::empty({s[0], s[2]});
  for (auto _ : state) {
    dnnl_sgemm('N', 'T', s[0], s[2], s[1], 1.f, x.data_ptr<float>(), s[1], w.data_ptr<float>(),
               s[1], 0.f, y.data_ptr<float>(), s[2]);
    benchmark::DoNotOptimize(y.data_ptr());
  }
  count(state, s);
}

void matmul_case(benchmark::State& state, Shape s) {
  using tag = dnnl::memory::format_tag;
  using dt = dnnl::memory::data_type;
  dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(engine);
  const dnnl::memory::dims xd = {s[0], s[1]}, wd = {s[1], s[2]}, yd = {s[0], s[2]};
  dnnl::memory::desc x_md(xd, dt::f32, tag::ab), w_any(wd, dt::f32, tag::any),
      y_md(yd, dt::f32, tag::ab);
  dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(x_md, w_any, y_md), engine);  // oneDNN 2.x
  auto x = at::randn({s[0], s[1]}), w = at::randn({s[2], s[1]}), y = at::empty({s[0], s[2]});
  // W^T [K, N] is W [N, K] read column-major: tag ba.
  dnnl::memory w_plain({wd, dt::f32, tag::ba}, engine, w.data_ptr<float>());
  dnnl::memory w_packed(pd.weights_desc(), engine);
  dnnl::reorder(w_plain, w_packed).execute(stream, w_plain, w_packed);
  dnnl::memory x_mem(x_md, engine, x.data_ptr<float>()), y_mem(y_md, engine, y.data_ptr<float>());
  dnnl::matmul product(pd);
  for (auto _ : state) {
    product.execute(stream,
                    {{DNNL_ARG_SRC, x_mem}, {DNNL_ARG_WEIGHTS, w_packed}, {DNNL_ARG_DST, y_mem}});
    stream.wait();
    benchmark::DoNotOptimize(y.data_ptr());
  }
  count(state, s);
}

}  // namespace

int main(int argc, char** argv) {
  at::set_num_threads(1);
  // A greedy step's projections and output layer, a beam step's (5 beams x 32), training's
  // output layer (512 target tokens) and a feed-forward block, and the peak's 1024^3.
  const std::vector<Shape> shapes = {{1, 256, 768},     {1, 256, 2784},   {64, 256, 768},
                                     {160, 256, 2784},  {512, 256, 2784}, {512, 256, 1024},
                                     {1024, 1024, 1024}};
  for (const auto& s : shapes) {
    const std::string name =
        std::to_string(s[0]) + "x" + std::to_string(s[1]) + "x" + std::to_string(s[2]);
    benchmark::RegisterBenchmark(("Packed/" + name).c_str(), packed_case, s)
        ->Unit(benchmark::kMicrosecond);
    benchmark::RegisterBenchmark(("DnnlSgemm/" + name).c_str(), sgemm_case, s)
        ->Unit(benchmark::kMicrosecond);
    benchmark::RegisterBenchmark(("DnnlMatmul/" + name).c_str(), matmul_case, s)
        ->Unit(benchmark::kMicrosecond);
  }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  return 0;
}
