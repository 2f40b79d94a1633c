#pragma once

#include <string>
#include <string_view>
#include <vector>

// UTF-8 helpers shared by the corpus readers, tokenizers and metrics.
namespace attnkit::text {

// Whether `s` is well-formed UTF-8 (no overlongs, surrogates or code points past U+10FFFF).
bool valid_utf8(std::string_view s);
// Decodes well-formed UTF-8 (callers validate first; malformed bytes become U+FFFD).
std::u32string decode(std::string_view s);
std::string encode(std::u32string_view s);
std::string encode(char32_t c);

// Removes a leading UTF-8 byte-order mark.
std::string_view strip_bom(std::string_view s);
// Removes trailing '\r' (CRLF files) and '\n'.
std::string_view strip_eol(std::string_view s);
// Collapses runs of whitespace (including newlines and tabs) to one space and trims the ends.
std::string squeeze_spaces(std::string_view s);

// ASCII-only lowercasing; other characters are kept as they are.
std::string ascii_lower(std::string_view s);

// Python's str.isspace() for one character (Unicode's White_Space set less U+180E): what
// str.split() and str.strip() take as whitespace. sacreBLEU splits and strips with these.
bool is_python_space(char32_t c);
// Python's str.split() and str.rstrip() without arguments, on UTF-8.
std::vector<std::string> python_split(std::string_view s);
std::string python_rstrip(std::string_view s);
// Python's str.lower(): full Unicode lowercasing (ICU's root-locale mapping, which like
// Python's applies SpecialCasing, e.g. U+0130 -> "i\u0307", and the final sigma).
std::string unicode_lower(std::string_view s);

bool is_cjk(char32_t c);

}  // namespace attnkit::text
