#include "attnkit/core/blas_core.h"

#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <random>

#include "attnkit/core/info.h"
#include "blas.h"

namespace attnkit {
namespace {

std::string ascii_lower_copy(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), ::tolower);
  return s;
}

bool has(const std::vector<std::string>& flags, const char* flag) {
  return std::find(flags.begin(), flags.end(), flag) != flags.end();
}

}  // namespace

int openblas_core_level(const std::string& core) {
  // The x86_64 cores of OpenBLAS 0.3.21's DYNAMIC_ARCH build (driver/others/dynamic.c), by the
  // widest instructions their SGEMM kernels use.
  static const std::map<std::string, int> levels = {
      {"katmai", 0},       {"coppermine", 0},    {"northwood", 0},  {"prescott", 0},
      {"banias", 0},       {"atom", 0},          {"core2", 0},      {"penryn", 0},
      {"dunnington", 0},   {"nehalem", 0},       {"athlon", 0},     {"opteron", 0},
      {"opteron_sse3", 0}, {"barcelona", 0},     {"nano", 0},       {"bobcat", 0},
      {"sandybridge", 1},  {"bulldozer", 1},     {"piledriver", 1}, {"steamroller", 1},
      {"excavator", 1},    {"haswell", 2},       {"zen", 2},        {"skylakex", 3},
      {"cooperlake", 3},   {"sapphirerapids", 3}};
  auto it = levels.find(ascii_lower_copy(core));
  return it == levels.end() ? -1 : it->second;
}

std::string best_openblas_core(const std::vector<std::string>& cpu_flags) {
  if (has(cpu_flags, "avx512f") && has(cpu_flags, "avx512bw") && has(cpu_flags, "avx512vl"))
    return "SkylakeX";
  if (has(cpu_flags, "avx2") && has(cpu_flags, "fma")) return "Haswell";
  if (has(cpu_flags, "avx")) return "Sandybridge";
  return "Prescott";
}

std::string live_openblas_core() {
  if (detect_blas().name != "OpenBLAS") return "";
  using StrFn = char* (*)();
  auto core = reinterpret_cast<StrFn>(dlsym(RTLD_DEFAULT, "openblas_get_corename"));
  return core ? core() : "";
}

double measure_sgemm_gflops(int n, double seconds) {
  ScopedBlasThreads one(1);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> uniform(-1.f, 1.f);
  std::vector<float> a(static_cast<size_t>(n) * n), b(a.size()), c(a.size());
  for (auto& x : a) x = uniform(rng);
  for (auto& x : b) x = uniform(rng);
  using clock = std::chrono::steady_clock;
  auto once = [&] {
    const auto start = clock::now();
    blas::gemm(/*trans_a=*/false, /*trans_b=*/false, n, n, n, 1.f, a.data(), n, b.data(), n, 0.f,
               c.data(), n);
    return std::chrono::duration<double>(clock::now() - start).count();
  };
  once();  // warm-up: OpenBLAS allocates its buffers on the first call
  double best = 1e30, spent = 0;
  for (int rep = 0; rep < 3 || spent < seconds; ++rep) {
    const double t = once();
    best = std::min(best, t);
    spent += t;
  }
  return 2.0 * n * n * static_cast<double>(n) / best * 1e-9;
}

}  // namespace attnkit
