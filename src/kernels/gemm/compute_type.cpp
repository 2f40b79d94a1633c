#include "attnkit/kernels/gemm/compute_type.h"

#include "attnkit/core/error.h"

namespace attnkit::kernels {

const char* to_string(ComputeType type) { return type == ComputeType::Int8 ? "int8" : "float32"; }

ComputeType parse_compute_type(const std::string& name) {
  if (name == "float32") return ComputeType::Float32;
  if (name == "int8") return ComputeType::Int8;
  throw Error("unknown compute type '" + name + "' (float32 | int8)");
}

}  // namespace attnkit::kernels
