#include "attnkit/data/po_catalog.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <tuple>

#include "attnkit/core/error.h"
#include "attnkit/core/files.h"
#include "attnkit/data/plural_forms.h"
#include "attnkit/data/text.h"
#include "charset.h"

namespace attnkit::data {
namespace {

constexpr size_t kNone = std::string::npos;
constexpr size_t kWidth = 79;  // gettext's default page width

// One physical line: [begin, end) without its line break, next = the following line's start.
struct Line {
  size_t begin, end, next, no;
};

std::string at(const std::string& path, size_t line) { return path + ":" + std::to_string(line); }

// The string literal starting at s[0] == '"': the unescaped text; `rest` gets what follows the
// closing quote. Errors name path:line.
std::string unquote(std::string_view s, std::string_view& rest, const std::string& where) {
  if (s.empty() || s[0] != '"') throw Error(where + ": expected a quoted string");
  std::string out;
  for (size_t i = 1; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '"') {
      rest = s.substr(i + 1);
      return out;
    }
    if (c != '\\') {
      out.push_back(c);
      continue;
    }
    if (++i >= s.size()) break;
    const char e = s[i];
    switch (e) {
      case 'n':
        out.push_back('\n');
        break;
      case 't':
        out.push_back('\t');
        break;
      case 'r':
        out.push_back('\r');
        break;
      case 'a':
        out.push_back('\a');
        break;
      case 'b':
        out.push_back('\b');
        break;
      case 'f':
        out.push_back('\f');
        break;
      case 'v':
        out.push_back('\v');
        break;
      case '\\':
      case '"':
      case '\'':
      case '?':
        out.push_back(e);
        break;
      case 'x': {
        size_t j = i + 1, v = 0;
        while (j < s.size() && std::isxdigit(static_cast<unsigned char>(s[j])) && j < i + 3)
          v = v * 16 + std::stoul(std::string(1, s[j++]), nullptr, 16);
        if (j == i + 1) throw Error(where + ": bad escape '\\x' (no hex digits)");
        out.push_back(static_cast<char>(v));
        i = j - 1;
        break;
      }
      default:
        if (e >= '0' && e <= '7') {
          size_t j = i, v = 0;
          while (j < s.size() && j < i + 3 && s[j] >= '0' && s[j] <= '7')
            v = v * 8 + (s[j++] - '0');
          out.push_back(static_cast<char>(v));
          i = j - 1;
        } else {
          throw Error(where + ": bad escape '\\" + std::string(1, e) + "'");
        }
    }
  }
  throw Error(where + ": unterminated string (no closing quote)");
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

// The quoted string after a keyword, nothing but blanks after it.
std::string string_after(std::string_view rest, const std::string& where) {
  std::string_view after;
  std::string value = unquote(trim(rest), after, where);
  if (!trim(after).empty())
    throw Error(where + ": unexpected text after the string: '" + std::string(trim(after)) + "'");
  return value;
}

// The msgstr[N] index, N from 0 to 99, or -1 for plain msgstr.
int plural_index(std::string_view keyword, const std::string& where) {
  if (keyword == "msgstr") return -1;
  const auto digits = keyword.substr(7, keyword.size() > 8 ? keyword.size() - 8 : 0);
  const bool ok =
      keyword.size() > 8 && keyword[6] == '[' && keyword.back() == ']' && !digits.empty() &&
      digits.size() <= 2 &&
      std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (!ok)
    throw Error(where + ": bad keyword '" + std::string(keyword) +
                "' (a plural form is msgstr[0] to msgstr[99])");
  return std::stoi(std::string(digits));
}

// Builds entries from the lines; one instance per parse.
class Parser {
 public:
  Parser(const std::string& text, const std::string& path) : text_(text), path_(path) {}

  std::vector<PoEntry> run() {
    size_t pos = 0, no = 0;
    while (pos < text_.size()) {
      size_t nl = text_.find('\n', pos);
      Line l{pos, nl == kNone ? text_.size() : nl, nl == kNone ? text_.size() : nl + 1, ++no};
      if (no == 1 && text_.compare(0, 3, "\xEF\xBB\xBF") == 0) l.begin += 3;
      line(l);
      pos = l.next;
    }
    finish(no);
    return std::move(entries_);
  }

 private:
  enum class Phase { None, Comments, Keywords };

  void line(const Line& l) {
    std::string_view s = trim(std::string_view(text_).substr(l.begin, l.end - l.begin));
    const std::string where = at(path_, l.no);
    if (s.empty()) {
      if (phase_ == Phase::Keywords) finish(l.no);
      return;
    }
    bool obsolete = false;
    if (s.rfind("#~", 0) == 0) {
      obsolete = true;
      s = trim(s.substr(2));
      if (s.empty() || s[0] == '|')
        return comment(l, s, true);  // "#~|": an obsolete previous msgid
    } else if (s[0] == '#') {
      return comment(l, s, false);
    }
    const auto keyword = s.substr(0, s.find_first_of(" \t\""));
    // A msgctxt or msgid after a msgstr starts the next entry (blank lines are optional).
    if (phase_ == Phase::Keywords && !e_.msgstr.empty() &&
        (keyword == "msgctxt" || keyword == "msgid"))
      finish(l.no);
    start(l);
    if (s[0] == '"') {
      if (!target_) throw Error(where + ": a string continuation with no keyword before it");
      *target_ += string_after(s, where);
      if (in_msgstr_) e_.msgstr_end = l.next;
      e_.end = l.next;
      return;
    }
    const auto rest = s.substr(keyword.size());
    e_.obsolete = e_.obsolete || obsolete;
    phase_ = Phase::Keywords;
    e_.end = l.next;
    in_msgstr_ = false;
    if (keyword == "msgctxt") {
      if (seen_msgid_ || e_.has_context) throw Error(where + ": msgctxt after msgid or msgctxt");
      e_.has_context = true;
      e_.context = string_after(rest, where);
      target_ = &e_.context;
      mark_keyword_start(l);
    } else if (keyword == "msgid") {
      if (seen_msgid_) throw Error(where + ": a second msgid in one entry");
      seen_msgid_ = true;
      e_.line = l.no;
      e_.msgid = string_after(rest, where);
      target_ = &e_.msgid;
      mark_keyword_start(l);
    } else if (keyword == "msgid_plural") {
      if (!seen_msgid_ || !e_.msgstr.empty())
        throw Error(where + ": msgid_plural must follow msgid");
      e_.msgid_plural = string_after(rest, where);
      plural_ = true;
      target_ = &e_.msgid_plural;
    } else if (keyword.rfind("msgstr", 0) == 0) {
      if (!seen_msgid_) throw Error(where + ": msgstr without msgid");
      const int index = plural_index(keyword, where);
      if (plural_ != (index >= 0))
        throw Error(where + (plural_ ? ": a plural entry needs msgstr[N], not msgstr"
                                     : ": msgstr[N] in an entry without msgid_plural"));
      const size_t i = std::max(index, 0);
      if (i != e_.msgstr.size())
        throw Error(where + ": expected " +
                    (plural_ ? "msgstr[" + std::to_string(e_.msgstr.size()) + "]"
                             : std::string("one msgstr")));
      if (e_.msgstr.empty()) e_.msgstr_begin = l.begin;
      e_.msgstr.push_back(string_after(rest, where));
      target_ = &e_.msgstr.back();
      in_msgstr_ = true;
      e_.msgstr_end = l.next;
    } else {
      throw Error(where + ": unknown keyword '" + std::string(keyword) + "'");
    }
  }

  void comment(const Line& l, std::string_view s, bool obsolete_previous) {
    if (phase_ == Phase::Keywords) finish(l.no);
    start(l);
    phase_ = Phase::Comments;
    e_.end = l.next;
    if (obsolete_previous || s.rfind("#|", 0) == 0) {
      if (e_.flags_insert == kNone) e_.flags_insert = l.begin;
      if (!obsolete_previous) previous(l, trim(s.substr(2)));
    } else if (s.rfind("#,", 0) == 0) {
      if (e_.flags_begin == kNone) {
        e_.flags_begin = l.begin;
        e_.flags_end = l.next;
      }
      std::stringstream flags{std::string(s.substr(2))};
      for (std::string f; std::getline(flags, f, ',');)
        if (auto t = trim(f); !t.empty()) e_.flags.emplace_back(t);
    } else if (s.size() == 1 || s[1] == ' ' || s[1] == '\t') {
      e_.comments.emplace_back(trim(s.substr(1)));
    }
  }

  // A "#|" line: the previous msgctxt, msgid or msgid_plural, or a continuation of one. The
  // line is a comment to msgfmt: one it cannot read is left as text, not an error.
  void previous(const Line& l, std::string_view s) {
    if (e_.previous_begin == kNone) e_.previous_begin = l.begin;
    e_.previous_end = e_.previous_end == l.begin || e_.previous_end == kNone ? l.next : kNone - 1;
    try {
      if (!s.empty() && s[0] == '"') {
        if (previous_target_) *previous_target_ += string_after(s, path_);
        return;
      }
      const auto keyword = s.substr(0, s.find_first_of(" \t\""));
      const auto rest = s.substr(keyword.size());
      previous_target_ = nullptr;
      if (keyword == "msgctxt") {
        e_.previous_has_context = true;
        e_.previous_context = string_after(rest, path_);
        previous_target_ = &e_.previous_context;
      } else if (keyword == "msgid") {
        e_.has_previous = true;
        e_.previous_msgid = string_after(rest, path_);
        previous_target_ = &e_.previous_msgid;
      } else if (keyword == "msgid_plural") {
        e_.previous_msgid_plural = string_after(rest, path_);
        previous_target_ = &e_.previous_msgid_plural;
      }
    } catch (const Error&) {
      e_.has_previous = false;
      previous_target_ = nullptr;
    }
  }

  void start(const Line& l) {
    if (phase_ != Phase::None) return;
    e_ = PoEntry();
    e_.begin = l.begin;
    e_.flags_begin = e_.flags_end = e_.flags_insert = e_.previous_begin = e_.previous_end = kNone;
    phase_ = Phase::Comments;
  }

  void mark_keyword_start(const Line& l) {
    if (e_.flags_insert == kNone) e_.flags_insert = l.begin;
  }

  // Ends the entry being read (at line `no`, for errors).
  void finish(size_t no) {
    if (phase_ == Phase::None) return;
    if (!seen_msgid_) {  // comments with no message after them (the end of the file): text
      if (e_.has_context) throw Error(at(path_, no) + ": msgctxt without msgid");
      reset();
      return;
    }
    if (e_.msgstr.empty())
      throw Error(at(path_, e_.line ? e_.line : no) + ": msgid without msgstr");
    if (e_.flags_insert == kNone) e_.flags_insert = e_.begin;
    if (!e_.obsolete) {
      auto key = std::make_tuple(e_.has_context, e_.context, e_.msgid);
      auto [it, fresh] = seen_.emplace(key, e_.line);
      if (!fresh)
        throw Error(at(path_, e_.line) + ": duplicate message definition (first at line " +
                    std::to_string(it->second) + ")");
    }
    entries_.push_back(std::move(e_));
    reset();
  }

  void reset() {
    phase_ = Phase::None;
    seen_msgid_ = plural_ = in_msgstr_ = false;
    target_ = previous_target_ = nullptr;
  }

  const std::string& text_;
  const std::string& path_;
  std::vector<PoEntry> entries_;
  std::map<std::tuple<bool, std::string, std::string>, size_t> seen_;
  PoEntry e_;
  Phase phase_ = Phase::None;
  bool seen_msgid_ = false, plural_ = false, in_msgstr_ = false;
  std::string* target_ = nullptr;
  std::string* previous_target_ = nullptr;
};

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '\\':
        out += "\\\\";
        break;
      case '"':
        out += "\\\"";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\a':
        out += "\\a";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      case '\v':
        out += "\\v";
        break;
      default:
        out.push_back(c);
    }
  }
  return out;
}

// Display columns of escaped UTF-8 text (CJK characters take two, as in a terminal).
size_t columns(std::string_view s) {
  size_t n = 0;
  for (char32_t c : text::decode(s)) n += text::is_cjk(c) ? 2 : 1;
  return n;
}

// Splits one escaped segment into pieces of at most `width` columns, breaking after a space or
// before a CJK character; a piece with no break point stays whole.
std::vector<std::string> wrap(const std::string& escaped, size_t width) {
  std::vector<std::string> pieces;
  const std::u32string s = text::decode(escaped);
  size_t start = 0;
  while (start < s.size()) {
    size_t cols = 0, i = start, brk = kNone;
    for (; i < s.size(); ++i) {
      const size_t w = text::is_cjk(s[i]) ? 2 : 1;
      if (cols + w > width) break;
      cols += w;
      if (s[i] == ' ') brk = i + 1;
      if (i + 1 < s.size() && text::is_cjk(s[i + 1]) && s[i] != '\\') brk = i + 1;
    }
    if (i == s.size()) brk = i;
    if (brk == kNone || brk <= start) {  // nothing to break at: run to the next break point
      brk = i;
      while (brk < s.size() && s[brk - 1] != ' ') ++brk;
    }
    // Never split an escape sequence ("\\" + letter) across lines.
    while (brk < s.size() && brk > start + 1 && s[brk - 1] == '\\') --brk;
    pieces.push_back(text::encode(std::u32string_view(s).substr(start, brk - start)));
    start = brk;
  }
  return pieces;
}

}  // namespace

bool PoEntry::has_flag(const std::string& flag) const {
  return std::find(flags.begin(), flags.end(), flag) != flags.end();
}

bool PoEntry::translated() const {
  return !msgstr.empty() &&
         std::all_of(msgstr.begin(), msgstr.end(), [](const std::string& s) { return !s.empty(); });
}

std::string render_po_keyword(const std::string& keyword, const std::string& s,
                              const std::string& eol) {
  const std::string escaped = escape(s);
  const size_t inner = escaped.find("\\n");
  const bool inner_newline = inner != kNone && inner + 2 < escaped.size();
  if (!inner_newline && keyword.size() + 3 + columns(escaped) <= kWidth)
    return keyword + " \"" + escaped + "\"" + eol;
  std::string out = keyword + " \"\"" + eol;
  for (size_t start = 0; start < escaped.size();) {
    size_t nl = escaped.find("\\n", start);
    // "\\n" preceded by an escaped backslash is not a newline: skip "\\\\n".
    while (nl != kNone && nl > 0 && escaped[nl - 1] == '\\') {
      size_t slashes = 0;
      for (size_t k = nl; k > start && escaped[k - 1] == '\\'; --k) ++slashes;
      if (slashes % 2 == 0) break;
      nl = escaped.find("\\n", nl + 1);
    }
    const size_t stop = nl == kNone ? escaped.size() : nl + 2;
    for (const auto& piece : wrap(escaped.substr(start, stop - start), kWidth - 2))
      out += "\"" + piece + "\"" + eol;
    start = stop;
  }
  return out;
}

PoCatalog PoCatalog::read(const std::string& path) {
  return parse(read_small_file(path, kMaxCatalogBytes, "a catalog"), path);
}

PoCatalog PoCatalog::parse(std::string bytes, const std::string& path) {
  PoCatalog c;
  c.path_ = path;
  // The header is ASCII in every charset gettext supports: read it from the raw bytes, then
  // decode the whole file if it is not UTF-8, and parse for real.
  {
    const size_t header_end = bytes.find("\n\n");
    PoCatalog head;
    head.path_ = path;
    head.text_ = bytes.substr(0, header_end == kNone ? bytes.size() : header_end + 1);
    try {
      head.entries_ = Parser(head.text_, path).run();
    } catch (const Error&) {
      head.entries_.clear();  // the full parse below reports the error with its line
    }
    const std::string type = head.header_field("Content-Type");
    const auto eq = type.find("charset=");
    if (eq != kNone) {
      std::string cs(trim(type.substr(eq + 8)));
      cs = cs.substr(0, cs.find_first_of("; "));
      if (!cs.empty() && cs != "CHARSET") c.charset_ = cs;
    }
  }
  if (!is_utf8(c.charset_))
    bytes = to_utf8(bytes, c.charset_, path);
  else if (!text::valid_utf8(bytes))
    throw Error(path + ": not valid UTF-8 (declare the file's charset in its Content-Type)");
  c.text_ = std::move(bytes);
  const size_t first_nl = c.text_.find('\n');
  if (first_nl != kNone && first_nl > 0 && c.text_[first_nl - 1] == '\r') c.eol_ = "\r\n";
  c.entries_ = Parser(c.text_, path).run();
  c.check_header();
  return c;
}

// What msgfmt --check refuses in a header, refused here with the line: bytes outside a declared
// ASCII, and a Plural-Forms it cannot evaluate (a template's "nplurals=INTEGER" is still blank).
void PoCatalog::check_header() const {
  if (entries_.empty() || !entries_[0].is_header()) return;
  const PoEntry& header = entries_[0];
  auto line_of = [&](size_t offset) {
    return 1 + static_cast<size_t>(std::count(text_.begin(), text_.begin() + offset, '\n'));
  };
  std::string cs = charset_;
  for (auto& ch : cs) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  if (cs == "ASCII" || cs == "US-ASCII")
    for (size_t i = 0; i < text_.size(); ++i)
      if (static_cast<unsigned char>(text_[i]) >= 0x80)
        throw Error(at(path_, line_of(i)) + ": a byte outside ASCII, the declared charset");
  const std::string forms = header_field("Plural-Forms");
  if (forms.empty() || forms.find("INTEGER") != kNone) return;
  // msgfmt looks for nplurals only when a message has plural forms: a catalog without any passes
  // with a misspelt attribute ("nulurals=1", found in binutils' ja catalog), and so it does here.
  const bool plurals =
      std::any_of(entries_.begin(), entries_.end(), [](const PoEntry& e) { return e.plural(); });
  if (!plurals && forms.find("nplurals") == kNone) return;
  try {
    PluralForms::parse(forms);
  } catch (const Error& e) {
    const size_t field = text_.find("Plural-Forms:", header.begin);
    const size_t line = field != kNone && field < header.end ? line_of(field) : header.line;
    throw Error(at(path_, line) + ": " + e.what());
  }
}

namespace {

// The header's line for `name` ("Name: value"), or nullopt.
std::optional<std::string> header_line(const std::vector<PoEntry>& entries,
                                       const std::string& name) {
  for (const auto& e : entries) {
    if (!e.is_header() || e.msgstr.empty()) continue;
    std::istringstream lines(e.msgstr[0]);
    for (std::string l; std::getline(lines, l);)
      if (l.size() > name.size() && l.compare(0, name.size(), name) == 0 && l[name.size()] == ':')
        return std::string(trim(std::string_view(l).substr(name.size() + 1)));
    return std::nullopt;
  }
  return std::nullopt;
}

}  // namespace

std::string PoCatalog::header_field(const std::string& name) const {
  return header_line(entries_, name).value_or("");
}

bool PoCatalog::header_has_field(const std::string& name) const {
  return header_line(entries_, name).has_value();
}

void PoCatalog::set_header_field(const std::string& name, const std::string& value) {
  for (auto& e : entries_) {
    if (!e.is_header() || e.msgstr.empty()) continue;
    std::istringstream lines(e.msgstr[0]);
    std::string out;
    bool found = false;
    for (std::string l; std::getline(lines, l);) {
      if (l.size() > name.size() && l.compare(0, name.size(), name) == 0 && l[name.size()] == ':') {
        l = name + ": " + value;
        found = true;
      }
      out += l + "\n";
    }
    if (!found) out += name + ": " + value + "\n";
    e.msgstr[0] = out;
    e.changed = true;
    return;
  }
}

int PoCatalog::nplurals() const {
  const std::string forms = header_field("Plural-Forms");
  if (forms.empty() || forms.find("INTEGER") != kNone) return 0;
  try {
    return PluralForms::parse(forms).nplurals();
  } catch (const Error&) {
    return 0;
  }
}

void PoCatalog::fill(size_t i, std::vector<std::string> msgstr, bool fuzzy,
                     std::vector<std::string> comments) {
  PoEntry& e = entries_.at(i);
  e.msgstr = std::move(msgstr);
  if (fuzzy && !e.fuzzy()) e.flags.insert(e.flags.begin(), "fuzzy");
  e.added_comments = std::move(comments);
  e.changed = true;
}

void PoCatalog::clear_fuzzy(size_t i) {
  PoEntry& e = entries_.at(i);
  e.flags.erase(std::remove(e.flags.begin(), e.flags.end(), "fuzzy"), e.flags.end());
  e.drop_previous = e.has_previous;
  e.changed = true;
}

std::string PoCatalog::write() const {
  std::string out;
  size_t copied = 0;  // text_[0, copied) is in `out`
  auto copy_to = [&](size_t pos) {
    out.append(text_, copied, pos - copied);
    copied = pos;
  };
  for (const auto& e : entries_) {
    if (!e.changed) continue;
    for (const auto& m : e.msgstr)
      if (!encodable(m, charset_))
        throw Error(at(path_, e.line) +
                    ": the translation cannot be written in the file's charset " + charset_ +
                    " (convert the file first: msgconv --to-code=UTF-8)");
    copy_to(e.begin);
    for (const auto& c : e.added_comments) out += "# " + c + eol_;
    const bool has_flags_line = e.flags_begin != kNone;
    const size_t flags_at = has_flags_line ? e.flags_begin : e.flags_insert;
    copy_to(flags_at);
    if (!e.flags.empty()) {
      std::string line = "#,";
      for (size_t f = 0; f < e.flags.size(); ++f) line += (f ? ", " : " ") + e.flags[f];
      out += line + eol_;
    }
    if (has_flags_line) copied = e.flags_end;
    if (e.drop_previous && e.previous_begin != kNone && e.previous_end < kNone - 1 &&
        e.previous_begin >= copied) {
      copy_to(e.previous_begin);
      copied = e.previous_end;
    }
    copy_to(e.msgstr_begin);
    for (size_t n = 0; n < e.msgstr.size(); ++n) {
      const std::string keyword = e.plural() ? "msgstr[" + std::to_string(n) + "]" : "msgstr";
      std::string lines = render_po_keyword(keyword, e.msgstr[n], eol_);
      if (e.obsolete) {
        std::string prefixed;
        std::istringstream in(lines);
        for (std::string l; std::getline(in, l);) prefixed += "#~ " + l + "\n";  // l keeps a \r
        lines = prefixed;
      }
      out += lines;
    }
    copied = e.msgstr_end;
    // A last msgstr line without a line break (the end of the file) stays without one.
    if (e.msgstr_end == text_.size() && !text_.empty() && text_.back() != '\n')
      out.resize(out.size() - eol_.size());
  }
  copy_to(text_.size());
  if (is_utf8(charset_)) return out;
  return from_utf8(out, charset_, path_);
}

void PoCatalog::save(const std::string& path) const { write_file_atomic(path, write()); }

}  // namespace attnkit::data
