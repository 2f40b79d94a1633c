#pragma once

#include <string>
#include <vector>

// Which kernels OpenBLAS runs, against what the CPU could run.
//
// OpenBLAS picks its kernels (its "core") from the CPU's vendor, family and model, and 0.3.21
// does not know recent CPUs: on Zen 5 it picks Haswell (AVX2), on Intel family 6 model 207
// Prescott (SSE3), where 1024^3 SGEMM runs at a fifth of its SkylakeX (AVX-512) rate.
// OPENBLAS_CORETYPE=<core> in the environment overrides the choice. attnkit's own products do
// not depend on it (kernels/cpu_isa.h), but LibTorch's do, and so does anything else in the
// process; `attnkit info` uses these to say so, with the measured cost.
namespace attnkit {

// The widest vector ISA a core's kernels use: 0 SSE (up to SSE4.2), 1 AVX, 2 AVX2 + FMA,
// 3 AVX-512; -1 for a name this table does not know. Case-insensitive, as OPENBLAS_CORETYPE is.
int openblas_core_level(const std::string& core);

// The core OPENBLAS_CORETYPE should name on a CPU with these /proc/cpuinfo flags: "SkylakeX"
// with AVX-512 F, BW and VL; "Haswell" with AVX2 and FMA; "Sandybridge" with AVX; else
// "Prescott".
std::string best_openblas_core(const std::vector<std::string>& cpu_flags);

// The core the live OpenBLAS runs ("" when the live BLAS is not OpenBLAS).
std::string live_openblas_core();

// Single-threaded n x n x n SGEMM through the live BLAS, in GFLOP/s: the best of as many repeats
// as fit in `seconds` (at least three), after one warm-up call.
double measure_sgemm_gflops(int n = 1024, double seconds = 0.3);

}  // namespace attnkit
