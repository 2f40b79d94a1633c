#include "attnkit/core/info.h"

#include <ATen/Parallel.h>
#include <ATen/Version.h>
#include <dlfcn.h>
#include <malloc.h>
#include <torch/version.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include "attnkit/version.h"

namespace attnkit {
namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), ::tolower);
  return s;
}

std::string cpuinfo_field(const std::string& field) {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.compare(0, field.size(), field) == 0) {
      auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(colon + 2);
    }
  }
  return "";
}

std::string torch_cpu_capability() {
  const std::string config = at::show_config();
  const std::string key = "CPU capability usage: ";
  auto at = config.find(key);
  if (at == std::string::npos) return "unknown";
  auto end = config.find('\n', at);
  return config.substr(at + key.size(), end - at - key.size());
}

}  // namespace

BlasInfo classify_blas_library(const std::string& resolved_path) {
  BlasInfo info;
  info.library = resolved_path;
  const std::string p = lower(resolved_path);
  if (p.find("openblas") != std::string::npos) {
    info.name = "OpenBLAS";
  } else if (p.find("blis") != std::string::npos) {
    info.name = "BLIS";
  } else if (p.find("mkl") != std::string::npos) {
    info.name = "MKL";
  } else if (p.find("atlas") != std::string::npos) {
    info.name = "ATLAS";
  } else if (p.find("/blas/") != std::string::npos || p.find("libblas.so") != std::string::npos) {
    // Debian's netlib reference BLAS lives in .../blas/libblas.so.3.
    info.name = "reference BLAS";
    info.is_reference = true;
  } else {
    info.name = "unknown";
  }
  return info;
}

BlasInfo detect_blas() {
  // Whatever library sgemm_ resolves to process-wide is what ATen's matmul calls.
  void* sgemm = dlsym(RTLD_DEFAULT, "sgemm_");
  Dl_info where{};
  if (!sgemm || !dladdr(sgemm, &where) || !where.dli_fname) {
    BlasInfo none;
    none.name = "none";
    none.detail = "no sgemm_ symbol is loaded";
    return none;
  }
  char resolved[PATH_MAX];
  const std::string path = realpath(where.dli_fname, resolved) ? resolved : where.dli_fname;
  BlasInfo info = classify_blas_library(path);
  if (info.name == "OpenBLAS") {
    using StrFn = char* (*)();
    using IntFn = int (*)();
    auto config = reinterpret_cast<StrFn>(dlsym(RTLD_DEFAULT, "openblas_get_config"));
    auto core = reinterpret_cast<StrFn>(dlsym(RTLD_DEFAULT, "openblas_get_corename"));
    auto threads = reinterpret_cast<IntFn>(dlsym(RTLD_DEFAULT, "openblas_get_num_threads"));
    std::ostringstream detail;
    if (config) detail << config();
    if (core) detail << ", core " << core();
    if (threads) detail << ", " << threads() << " threads";
    info.detail = detail.str();
  }
  return info;
}

RuntimeInfo runtime_info() {
  RuntimeInfo info;
  info.attnkit_version = kVersion;
  info.torch_version = TORCH_VERSION;
  info.blas = detect_blas();
  info.intra_op_threads = at::get_num_threads();
  info.inter_op_threads = at::get_num_interop_threads();
  info.hardware_threads = std::thread::hardware_concurrency();
  info.cpu_model = cpuinfo_field("model name");
  info.torch_cpu_capability = torch_cpu_capability();
  std::istringstream flags(" " + cpuinfo_field("flags") + " ");
  const std::vector<std::string> wanted = {"sse4_2",      "avx",         "avx2",     "fma",
                                           "f16c",        "avx512f",     "avx512bw", "avx512vl",
                                           "avx512_vnni", "avx512_bf16", "amx_tile"};
  std::vector<std::string> present;
  for (std::string f; flags >> f;) present.push_back(f);
  for (const auto& w : wanted)
    if (std::find(present.begin(), present.end(), w) != present.end())
      info.cpu_features.push_back(w);
  return info;
}

void tune_allocator() {
  // Serve large blocks from the heap, and never trim it: the next step reuses the pages.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);  // glibc's maximum on 64-bit
  mallopt(M_TRIM_THRESHOLD, -1);
}

namespace {

std::atomic<int> configured{0};
std::atomic<ThreadPolicy> configured_as{ThreadPolicy::IntraOp};

// OpenBLAS's thread controls, looked up at run time: another BLAS may be the live one.
void set_blas_threads(int n) {
  using SetThreads = void (*)(int);
  if (auto set = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads")))
    set(n);
}

}  // namespace

int blas_threads() {
  using GetThreads = int (*)();
  // Looked up once: the kernels ask on every product (kernels/row_parts.h).
  static const auto get =
      reinterpret_cast<GetThreads>(dlsym(RTLD_DEFAULT, "openblas_get_num_threads"));
  return get ? std::max(1, get()) : 1;
}

int configured_threads() {
  const int n = configured;
  return n > 0 ? n : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

ThreadPolicy configured_policy() { return configured_as; }

ScopedBlasThreads::ScopedBlasThreads(int n) : previous_(blas_threads()) { set_blas_threads(n); }

ScopedBlasThreads::~ScopedBlasThreads() { set_blas_threads(previous_); }

void set_threads(int n, ThreadPolicy policy) {
  if (n <= 0) n = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  configured = n;
  configured_as = policy;
  at::set_num_threads(policy == ThreadPolicy::IntraOp ? n : 1);
  set_blas_threads(policy == ThreadPolicy::Blas ? n : 1);
}

}  // namespace attnkit
