#include "attnkit/kernels/cpu/cpu_isa.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>

#include "attnkit/core/error.h"

namespace attnkit::kernels {

namespace detail {
std::atomic<int> active_isa{-1};

Isa init_cpu_isa() {
  const char* forced = std::getenv("ATTNKIT_ISA");
  Isa isa = detected_isa();
  if (forced && *forced) {
    try {
      isa = parse_isa(forced);
    } catch (const Error& e) {
      throw Error(std::string("ATTNKIT_ISA: ") + e.what());
    }
    if (!cpu_supports(isa))
      throw Error(std::string("ATTNKIT_ISA=") + forced + ": this CPU does not run " +
                  to_string(isa) + " (the widest it runs is " + to_string(detected_isa()) + ")");
  }
  active_isa.store(static_cast<int>(isa), std::memory_order_relaxed);
  return isa;
}
}  // namespace detail

Isa detected_isa() {
  static const Isa isa = [] {
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) return Isa::Scalar;
    return __builtin_cpu_supports("avx512f") ? Isa::Avx512 : Isa::Avx2;
  }();
  return isa;
}

bool cpu_supports(Isa isa) { return static_cast<int>(isa) <= static_cast<int>(detected_isa()); }

std::vector<Isa> supported_isas() {
  std::vector<Isa> out;
  for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512})
    if (cpu_supports(isa)) out.push_back(isa);
  return out;
}

const char* to_string(Isa isa) {
  switch (isa) {
    case Isa::Avx512:
      return "avx512";
    case Isa::Avx2:
      return "avx2";
    case Isa::Scalar:
      break;
  }
  return "scalar";
}

Isa parse_isa(const std::string& name) {
  std::string n = name;
  std::transform(n.begin(), n.end(), n.begin(), [](unsigned char c) { return std::tolower(c); });
  for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512})
    if (n == to_string(isa)) return isa;
  throw Error("unknown ISA '" + name + "' (scalar | avx2 | avx512)");
}

void set_cpu_isa(Isa isa) {
  if (!cpu_supports(isa))
    throw Error(std::string("this CPU does not run ") + to_string(isa) +
                " (the widest it runs is " + to_string(detected_isa()) + ")");
  detail::active_isa.store(static_cast<int>(isa), std::memory_order_relaxed);
}

}  // namespace attnkit::kernels
