#include "attnkit/data/alignment.h"

#include <sstream>

#include "attnkit/core/error.h"

namespace attnkit::data {

std::string format_alignment(const Alignment& a) {
  std::string out;
  for (const auto& [s, t] : a)
    out += (out.empty() ? "" : " ") + std::to_string(s) + "-" + std::to_string(t);
  return out;
}

Alignment parse_alignment(const std::string& text) {
  Alignment a;
  std::istringstream in(text);
  for (std::string link; in >> link;) {
    const auto dash = link.find_first_of("-?");
    if (dash == std::string::npos || dash == 0 || dash + 1 == link.size())
      throw Error("bad alignment link '" + link + "' (expected source-target, e.g. 3-4)");
    try {
      a.insert({std::stoi(link.substr(0, dash)), std::stoi(link.substr(dash + 1))});
    } catch (const std::exception&) {
      throw Error("bad alignment link '" + link + "' (expected source-target, e.g. 3-4)");
    }
  }
  return a;
}

}  // namespace attnkit::data
