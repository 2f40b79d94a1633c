#pragma once

#include <stdexcept>
#include <string>

namespace attnkit {

// An error caused by the user's input (a file, a flag, a state_dict), as opposed to a bug.
// Its message names what was wrong and where, so the CLI can print it as is.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

}  // namespace attnkit
