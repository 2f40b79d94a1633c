#include "format.h"

#include <ATen/ATen.h>

#include <iomanip>
#include <sstream>

namespace attnkit::cli {
namespace {

void write(std::ostringstream& out, const at::Tensor& t, int precision, int depth) {
  if (t.dim() == 0) {
    out << std::fixed << std::setprecision(precision) << t.item<double>();
    return;
  }
  out << '[';
  for (int64_t i = 0; i < t.size(0); ++i) {
    if (i) out << (t.dim() > 1 ? ",\n" + std::string(depth + 1, ' ') : ", ");
    write(out, t[i], precision, depth + 1);
  }
  out << ']';
}

}  // namespace

std::string format_tensor(const at::Tensor& t, int precision) {
  std::ostringstream out;
  write(out, t.detach().to(at::kDouble), precision, 0);
  return out.str();
}

std::string format_shape(const at::Tensor& t) {
  std::ostringstream out;
  out << t.sizes();
  return out.str();
}

std::string choices(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : " | ") + n;
  return out;
}

}  // namespace attnkit::cli
