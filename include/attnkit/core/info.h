#pragma once

#include <string>
#include <vector>

namespace attnkit {

// Which BLAS implementation actually serves sgemm_ in this process.
struct BlasInfo {
  std::string library;  // resolved path of the shared object that provides sgemm_
  std::string name;     // "OpenBLAS", "reference BLAS", "BLIS", "MKL" or "unknown"
  std::string detail;   // e.g. OpenBLAS's build config and core name
  bool is_reference = false;
};

struct RuntimeInfo {
  std::string attnkit_version;
  std::string torch_version;
  BlasInfo blas;
  int intra_op_threads = 0;
  int inter_op_threads = 0;
  unsigned hardware_threads = 0;
  std::string cpu_model;
  std::string torch_cpu_capability;       // the kernel level ATen dispatches to, e.g. "AVX2"
  std::vector<std::string> cpu_features;  // the SIMD features this CPU reports
};

// Classifies a BLAS by the file it was loaded from; split out of detect_blas() for testing.
BlasInfo classify_blas_library(const std::string& resolved_path);
BlasInfo detect_blas();
RuntimeInfo runtime_info();

// Sets LibTorch's intra-op thread count (n <= 0: one per hardware thread) and runs OpenBLAS
// single-threaded inside those threads, so two thread pools never spin against each other.
void set_threads(int n);

// Keeps freed tensor memory in the process instead of returning it to the OS after every op.
// glibc's defaults unmap and re-fault large temporaries on each call, which measured 2.2x
// slower on an additive-attention decoder step (bench: Attention/additive/local/step).
void tune_allocator();

}  // namespace attnkit
