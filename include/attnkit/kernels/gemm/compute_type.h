#pragma once

#include <string>

// What the inference products compute in, as CTranslate2's compute_type: float32, or int8 (the
// weights quantized per output row, each product's input rows quantized at run time, the sums
// exact in int32: src/kernels/int8_gemm.h). Training always computes in float32.
namespace attnkit::kernels {

enum class ComputeType { Float32, Int8 };

// "float32", "int8"; parse_compute_type accepts these and throws attnkit::Error otherwise.
const char* to_string(ComputeType type);
ComputeType parse_compute_type(const std::string& name);

}  // namespace attnkit::kernels
