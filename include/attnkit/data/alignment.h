#pragma once

#include <set>
#include <string>
#include <utility>

// Word alignments between a source and a target sentence.
namespace attnkit::data {

// Links are (source position, target position).
using Alignment = std::set<std::pair<int, int>>;

// "0-0 1-2 ..." (source-target), the Pharaoh format alignment tools read and write; a malformed
// link is an attnkit::Error naming it.
std::string format_alignment(const Alignment& a);
Alignment parse_alignment(const std::string& text);

}  // namespace attnkit::data
