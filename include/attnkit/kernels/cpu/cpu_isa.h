#pragma once

#include <atomic>
#include <string>
#include <vector>

// The one CPU dispatch of attnkit's kernels: every vectorised loop (src/kernels/simd.h, the GRU
// gates, Adam, dropout) and every packed product (src/kernels/packed_gemm.h) asks cpu_isa() which
// code to run, so one setting moves all of them together, as CTranslate2's CpuIsa does.
//
// ATTNKIT_ISA=scalar|avx2|avx512 forces one (CTranslate2's CT2_FORCE_CPU_ISA): to compare the
// paths on one machine, or to rule a vector path out when a result looks wrong. The test suite
// runs the kernel tests once under each ISA the CPU has (tests/CMakeLists.txt), so the scalar
// fallbacks are held to the same references as the vector code.
namespace attnkit::kernels {

// Ordered: each ISA's code may use everything below it.
enum class Isa { Scalar = 0, Avx2 = 1, Avx512 = 2 };

// The widest ISA this CPU runs. Avx2 needs AVX2 and FMA; Avx512 needs AVX-512F as well.
Isa detected_isa();
bool cpu_supports(Isa isa);
// Every ISA the CPU runs, Scalar first.
std::vector<Isa> supported_isas();

// "scalar", "avx2", "avx512"; parse_isa accepts these (any case) and throws attnkit::Error
// otherwise.
const char* to_string(Isa isa);
Isa parse_isa(const std::string& name);

namespace detail {
extern std::atomic<int> active_isa;  // -1 until the first cpu_isa()
Isa init_cpu_isa();
}  // namespace detail

// The ISA the kernels run: ATTNKIT_ISA when set, else detected_isa(), read on first use. An
// unknown name, or an ISA this CPU lacks, is an attnkit::Error naming the variable (the CLI checks
// it before any work). One relaxed load per call: cheap enough for a kernel's entry.
inline Isa cpu_isa() {
  const int isa = detail::active_isa.load(std::memory_order_relaxed);
  return isa >= 0 ? static_cast<Isa>(isa) : detail::init_cpu_isa();
}

// Makes `isa` the one the kernels run from now on; throws attnkit::Error if the CPU lacks it.
// Not for use while kernels run on other threads: a kernel may read it more than once.
void set_cpu_isa(Isa isa);

// set_cpu_isa for a scope, restoring the previous ISA after (tests).
class ScopedIsa {
 public:
  explicit ScopedIsa(Isa isa) : previous_(cpu_isa()) { set_cpu_isa(isa); }
  ~ScopedIsa() { set_cpu_isa(previous_); }
  ScopedIsa(const ScopedIsa&) = delete;
  ScopedIsa& operator=(const ScopedIsa&) = delete;

 private:
  Isa previous_;
};

}  // namespace attnkit::kernels
