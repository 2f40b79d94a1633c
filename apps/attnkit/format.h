#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

namespace attnkit::cli {

// Nested-bracket text of a tensor, like Python's list view: [[0.5761, 0.2119, 0.2119]].
std::string format_tensor(const at::Tensor& t, int precision = 4);
std::string format_shape(const at::Tensor& t);

// "choice | choice | ...", for an option's help (from the names' one table, e.g.
// score_kind_names()).
std::string choices(const std::vector<std::string>& names);

}  // namespace attnkit::cli
