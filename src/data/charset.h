#pragma once

#include <string>

// Charset conversion for catalogs declared in something other than UTF-8 (GB2312, GBK,
// ISO-8859-1, ...), through glibc's iconv: attnkit works in UTF-8 and writes back in the
// file's charset.
namespace attnkit::data {

bool is_utf8(const std::string& charset);  // "UTF-8", "utf8", ASCII (a subset)
// Throws attnkit::Error naming `path` on an unknown charset or bytes invalid in it.
std::string to_utf8(const std::string& bytes, const std::string& charset, const std::string& path);
std::string from_utf8(const std::string& utf8, const std::string& charset, const std::string& path);
// Whether `utf8` can be written in `charset`.
bool encodable(const std::string& utf8, const std::string& charset);

}  // namespace attnkit::data
