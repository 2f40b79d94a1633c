// Peak memory of one attention forward pass (kept for backward), fused against composite.
// Usage: attnkit_attention_memory fused|composite N T d   -> prints the peak RSS growth in MiB.
// One case per process, so the peak belongs to that case alone.

#include <ATen/ATen.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

#include "attnkit/attention/functional.h"
#include "attnkit/kernels/ops/fused_attention.h"

namespace {

double status_mib(const char* field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(field, 0) == 0) return std::stod(line.substr(std::strlen(field))) / 1024.0;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s fused|composite N T d\n", argv[0]);
    return 2;
  }
  const bool fused = std::string(argv[1]) == "fused";
  const int64_t n = std::stoll(argv[2]), t = std::stoll(argv[3]), d = std::stoll(argv[4]);
  auto q = at::randn({n, t, d}).requires_grad_(), k = at::randn({n, t, d}).requires_grad_(),
       v = at::randn({n, t, d}).requires_grad_();
  const double before = status_mib("VmRSS:");
  auto out = fused ? attnkit::kernels::fused_attention(q, k, v)
                   : attnkit::functional::scaled_dot_product_attention(q, k, v).first;
  out.sum().backward();
  std::printf("%.1f\n", status_mib("VmHWM:") - before);
  return 0;
}
