#include "attnkit/data/text.h"

#include <unicode/locid.h>
#include <unicode/unistr.h>

namespace attnkit::text {
namespace {

// Length of the UTF-8 sequence starting at s[i] if it is well-formed, else 0.
size_t sequence_length(std::string_view s, size_t i, char32_t* out) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) {
    *out = b0;
    return 1;
  }
  size_t n;
  char32_t c;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    n = 2;
    c = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    n = 3;
    c = b0 & 0x0F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    n = 4;
    c = b0 & 0x07;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    const auto b = static_cast<unsigned char>(s[i + k]);
    if ((b & 0xC0) != 0x80) return 0;
    c = (c << 6) | (b & 0x3F);
  }
  if ((n == 3 && c < 0x800) || (n == 4 && (c < 0x10000 || c > 0x10FFFF)) ||
      (c >= 0xD800 && c <= 0xDFFF))
    return 0;
  *out = c;
  return n;
}

}  // namespace

bool valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    char32_t c;
    const size_t n = sequence_length(s, i, &c);
    if (!n) return false;
    i += n;
  }
  return true;
}

std::u32string decode(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    char32_t c;
    const size_t n = sequence_length(s, i, &c);
    if (n) {
      out.push_back(c);
      i += n;
    } else {
      out.push_back(0xFFFD);
      ++i;
    }
  }
  return out;
}

std::string encode(char32_t c) {
  std::string out;
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
  return out;
}

std::string encode(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) out += encode(c);
  return out;
}

std::string_view strip_bom(std::string_view s) {
  return s.substr(0, 3) == "\xEF\xBB\xBF" ? s.substr(3) : s;
}

std::string_view strip_eol(std::string_view s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

std::string squeeze_spaces(std::string_view s) {
  std::string out;
  bool space = false;
  for (char ch : s) {
    if (ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == '\v' || ch == '\f') {
      space = !out.empty();
    } else {
      if (space) out.push_back(' ');
      space = false;
      out.push_back(ch);
    }
  }
  return out;
}

bool is_python_space(char32_t c) {
  return c == U' ' || (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x1F) || c == 0x85 ||
         c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
         c == 0x202F || c == 0x205F || c == 0x3000;
}

std::vector<std::string> python_split(std::string_view s) {
  std::vector<std::string> words;
  std::u32string word;
  for (char32_t c : decode(s)) {
    if (!is_python_space(c)) {
      word += c;
    } else if (!word.empty()) {
      words.push_back(encode(word));
      word.clear();
    }
  }
  if (!word.empty()) words.push_back(encode(word));
  return words;
}

std::string python_rstrip(std::string_view s) {
  auto u = decode(s);
  while (!u.empty() && is_python_space(u.back())) u.pop_back();
  return encode(u);
}

std::string unicode_lower(std::string_view s) {
  const icu::UnicodeString u = icu::UnicodeString::fromUTF8(icu::StringPiece(s.data(), s.size()));
  std::string out;
  icu::UnicodeString(u).toLower(icu::Locale::getRoot()).toUTF8String(out);
  return out;
}

std::string ascii_lower(std::string_view s) {
  std::string out(s);
  for (auto& ch : out)
    if (ch >= 'A' && ch <= 'Z') ch = static_cast<char>(ch - 'A' + 'a');
  return out;
}

bool is_cjk(char32_t c) {
  return (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x4E00 && c <= 0x9FFF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x20000 && c <= 0x2FA1F) ||
         (c >= 0x3000 && c <= 0x303F) || (c >= 0xFF00 && c <= 0xFFEF) ||
         (c >= 0x2E80 && c <= 0x2FDF) || (c >= 0x3100 && c <= 0x312F) ||
         (c >= 0xFE30 && c <= 0xFE4F);
}

}  // namespace attnkit::text
