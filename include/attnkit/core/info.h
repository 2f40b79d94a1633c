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

// Who gets the cores. LibTorch's OpenMP pool and OpenBLAS's pthread pool both busy-wait
// between jobs, so only one of them may own more than one thread: with both at 2 threads a
// training run measured 3.2x slower than with either alone.
enum class ThreadPolicy {
  // OpenMP intra-op threads; OpenBLAS runs in the calling thread. Best for attention
  // kernels and large elementwise work, which LibTorch and attnkit parallelise themselves.
  IntraOp,
  // OpenBLAS threads; LibTorch ops run in the calling thread. Best where OpenBLAS does the
  // products, as in decoding batch by batch.
  Blas,
  // attnkit's kernels own the threads: LibTorch and OpenBLAS run in the calling thread, and
  // the packed products and sequence kernels split their rows between threads of their own
  // (no pool waits between products for them). Best for training, whose products are
  // nearly all attnkit's.
  Kernels,
};

// n <= 0: one thread per hardware thread.
void set_threads(int n, ThreadPolicy policy = ThreadPolicy::IntraOp);
// The thread count last given to set_threads (resolved), or the hardware threads before any call.
int configured_threads();
// The policy last given to set_threads (IntraOp before any call).
ThreadPolicy configured_policy();

// OpenBLAS's thread count (1 for a BLAS without threads of its own).
int blas_threads();

// Sets OpenBLAS's thread count for the guard's lifetime and restores the previous count after.
// For code that runs several BLAS callers side by side, each of which must stay single-threaded.
class ScopedBlasThreads {
 public:
  explicit ScopedBlasThreads(int n);
  ~ScopedBlasThreads();
  ScopedBlasThreads(const ScopedBlasThreads&) = delete;
  ScopedBlasThreads& operator=(const ScopedBlasThreads&) = delete;

 private:
  int previous_;
};

// Keeps freed tensor memory in the process instead of returning it to the OS after every op.
// glibc's defaults unmap and re-fault large temporaries on each call, which measured 2.2x
// slower on an additive-attention decoder step (bench: Attention/additive/local/step).
void tune_allocator();

}  // namespace attnkit
