#include "charset.h"

#include <iconv.h>

#include <algorithm>
#include <cerrno>
#include <optional>

#include "attnkit/core/error.h"

namespace attnkit::data {
namespace {

std::string upper(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::toupper(c); });
  return s;
}

// Converts `in` from one charset to another; nullopt when the input has a sequence invalid in
// `from` or a character `to` cannot hold. Throws on an unknown charset.
std::optional<std::string> convert(const std::string& in, const std::string& from,
                                   const std::string& to, const std::string& path) {
  iconv_t cd = iconv_open(to.c_str(), from.c_str());
  if (cd == reinterpret_cast<iconv_t>(-1))
    throw Error(path + ": unknown charset '" + (upper(from) == "UTF-8" ? to : from) + "'");
  std::string out(in.size() * 4 + 16, '\0');
  char* src = const_cast<char*>(in.data());
  size_t src_left = in.size(), dst_left = out.size();
  char* dst = out.data();
  const size_t r = iconv(cd, &src, &src_left, &dst, &dst_left);
  iconv_close(cd);
  if (r == static_cast<size_t>(-1)) return std::nullopt;
  out.resize(out.size() - dst_left);
  return out;
}

}  // namespace

bool is_utf8(const std::string& charset) {
  const std::string u = upper(charset);
  return u == "UTF-8" || u == "UTF8" || u == "ASCII" || u == "US-ASCII" || u == "CHARSET";
}

std::string to_utf8(const std::string& bytes, const std::string& charset, const std::string& path) {
  auto out = convert(bytes, charset, "UTF-8", path);
  if (!out) throw Error(path + ": bytes that are not valid " + charset + " (the declared charset)");
  return *out;
}

std::string from_utf8(const std::string& utf8, const std::string& charset,
                      const std::string& path) {
  auto out = convert(utf8, "UTF-8", charset, path);
  if (!out) throw Error(path + ": text that cannot be written in " + charset);
  return *out;
}

bool encodable(const std::string& utf8, const std::string& charset) {
  return is_utf8(charset) || convert(utf8, "UTF-8", charset, "").has_value();
}

}  // namespace attnkit::data
