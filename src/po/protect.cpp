#include "attnkit/po/protect.h"

#include <unicode/uchar.h>

#include <ATen/ATen.h>

#include <algorithm>
#include <cctype>
#include <map>

#include "attnkit/data/text.h"
#include "attnkit/data/tokenizer.h"
#include "attnkit/po/glossary.h"

namespace attnkit::po {
namespace {

bool alpha(char c) { return std::isalpha(static_cast<unsigned char>(c)); }
bool alnum(char c) { return std::isalnum(static_cast<unsigned char>(c)); }
bool space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
bool starts(std::string_view s, size_t i, std::string_view p) { return s.substr(i, p.size()) == p; }

// A printf placeholder (data::placeholder_length), or one of gettext's system-dependent ones
// ("%<PRIdMAX>", which msgfmt expands per platform).
size_t printf_length(std::string_view s, size_t i) {
  if (starts(s, i, "%<PRI")) {
    size_t j = i + 5;
    while (j < s.size() && alnum(s[j])) ++j;
    if (j < s.size() && s[j] == '>') return j - i + 1;
  }
  if (size_t n = data::placeholder_length(s, i)) return n;
  // A width or precision taken from the arguments: "%*d", "%.*s", "%-*.*f".
  if (s[i] != '%') return 0;
  size_t j = i + 1;
  while (j < s.size() && std::string_view("-+ #0'").find(s[j]) != std::string_view::npos) ++j;
  bool star = false;
  auto number = [&] {
    if (j < s.size() && s[j] == '*')
      star = true, ++j;
    else
      while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j]))) ++j;
  };
  number();
  if (j < s.size() && s[j] == '.') ++j, number();
  while (j < s.size() && std::string_view("hlLqjzt").find(s[j]) != std::string_view::npos) ++j;
  return star && j < s.size() &&
                 std::string_view("diouxXeEfFgGaAcsp").find(s[j]) != std::string_view::npos
             ? j - i + 1
             : 0;
}

// A conversion that takes the next argument ("%s", "%.*s", "%<PRIdMAX>"), as opposed to a
// numbered ("%1$s") or named ("%(name)s") one, or "%%": their order is the program's.
bool sequential(const std::string& span) {
  return span.size() > 1 && span[0] == '%' && span[1] != '%' && span[1] != '(' &&
         span.find('$') == std::string::npos;
}

size_t variable_length(std::string_view s, size_t i) {  // ${var} or $VAR
  if (s[i] != '$' || i + 1 >= s.size()) return 0;
  if (s[i + 1] == '{') {
    const auto close = s.find('}', i + 2);
    return close != std::string_view::npos && close > i + 2 && close - i < 64 ? close - i + 1 : 0;
  }
  if (!alpha(s[i + 1]) && s[i + 1] != '_') return 0;
  size_t j = i + 1;
  while (j < s.size() && (alnum(s[j]) || s[j] == '_')) ++j;
  return j - i;
}

// HTML's and Pango's element names. Only these are markup: "<name>", "<path>", "<unknown>",
// "<standard input>" are words that translators translate (dpkg's "--%s needs <link> <name>
// <path>" becomes "--%s 需要 <链接> <名称> <路径>"); taking them out as tags cost the held-out
// catalogs of docs/po.md 1 BLEU.
bool markup_name(std::string_view name) {
  static const char* const kNames[] = {
      "a",   "abbr", "b",     "big", "blockquote", "br", "cite", "code", "dd",    "div",  "dl",
      "dt",  "em",   "h1",    "h2",  "h3",         "h4", "h5",   "h6",   "hr",    "i",    "img",
      "kbd", "li",   "ol",    "p",   "pre",        "q",  "s",    "samp", "small", "span", "strong",
      "sub", "sup",  "table", "td",  "th",         "tr", "tt",   "u",    "ul",    "var"};
  std::string lower(name);
  for (auto& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const char* n : kNames)
    if (lower == n) return true;
  return false;
}

size_t tag_length(std::string_view s, size_t i) {  // <b>, </b>, <a href="...">, <br/>
  if (s[i] != '<') return 0;
  size_t j = i + 1;
  if (j < s.size() && s[j] == '/') ++j;
  const size_t name = j;
  while (j < s.size() && alnum(s[j])) ++j;
  if (j == name || j >= s.size() || !markup_name(s.substr(name, j - name))) return 0;
  if (s[j] != '>' && s[j] != '/' && !space(s[j])) return 0;
  for (; j < s.size() && j - i < 400; ++j) {
    if (s[j] == '>') return j - i + 1;
    if (s[j] == '<' || s[j] == '\n') return 0;
  }
  return 0;
}

size_t entity_length(std::string_view s, size_t i) {  // &amp; &#169; &#x263A;
  if (s[i] != '&') return 0;
  size_t j = i + 1;
  if (j < s.size() && s[j] == '#') {
    ++j;
    if (j < s.size() && (s[j] == 'x' || s[j] == 'X')) ++j;
  }
  const size_t name = j;
  while (j < s.size() && alnum(s[j]) && j - i < 12) ++j;
  return j > name && j < s.size() && s[j] == ';' ? j - i + 1 : 0;
}

// A run up to whitespace or a delimiter, less trailing sentence punctuation.
size_t run_length(std::string_view s, size_t i, size_t min) {
  size_t j = i;
  // Stops at non-ASCII too: in a translation a span is often followed by a CJK character.
  while (j < s.size() && !space(s[j]) && static_cast<unsigned char>(s[j]) < 0x80 &&
         std::string_view("<>\"'").find(s[j]) == std::string_view::npos)
    ++j;
  while (j > i && std::string_view(".,;:!?)").find(s[j - 1]) != std::string_view::npos) --j;
  return j - i >= min ? j - i : 0;
}

// After a space, an opening delimiter or a non-ASCII character (a translation's CJK text).
bool word_start(std::string_view s, size_t i) {
  return i == 0 || space(s[i - 1]) || static_cast<unsigned char>(s[i - 1]) >= 0x80 ||
         std::string_view("([\"'=").find(s[i - 1]) != std::string_view::npos;
}

// A program's identifier: letters, digits and inner underscores ("in_arcnet", "IP_ADDRESS",
// "FIN_WAIT1", "debug_addr"), which a sentence model splits and translates. Not an accelerator's
// shape ("E_xit": one underscore, a capital first and a lowercase letter after it).
size_t identifier_length(std::string_view s, size_t i) {
  if (!alpha(s[i])) return 0;
  if (i > 0 &&
      (alnum(s[i - 1]) || std::string_view("_$%-/.\\").find(s[i - 1]) != std::string_view::npos))
    return 0;
  size_t j = i;
  while (j < s.size() && (alnum(s[j]) || s[j] == '_')) ++j;
  while (j > i && s[j - 1] == '_') --j;  // "name_" is a word and an underscore
  size_t underscores = 0, after = 0;     // inner underscores, and the letter after the last
  for (size_t k = i; k < j; ++k)
    if (s[k] == '_') {
      ++underscores;
      after = k + 1;
    }
  if (underscores == 0) return 0;
  const bool accelerator_shape = underscores == 1 &&
                                 std::isupper(static_cast<unsigned char>(s[i])) &&
                                 std::islower(static_cast<unsigned char>(s[after]));
  return accelerator_shape ? 0 : j - i;
}

size_t url_length(std::string_view s, size_t i) {
  for (std::string_view scheme : {"https://", "http://", "ftp://", "file://", "www."})
    if (starts(s, i, scheme)) return run_length(s, i, scheme.size() + 1);
  return 0;
}

size_t email_length(std::string_view s, size_t i) {
  auto local = [](char c) {
    return alnum(c) || std::string_view("._%+-").find(c) != std::string_view::npos;
  };
  if (!word_start(s, i) || !local(s[i])) return 0;
  size_t at = i;
  while (at < s.size() && local(s[at])) ++at;
  if (at == i || at >= s.size() || s[at] != '@') return 0;
  size_t j = at + 1;
  bool dot = false;
  while (j < s.size() && (alnum(s[j]) || s[j] == '-' || s[j] == '.')) dot |= s[j++] == '.';
  while (j > at + 1 && s[j - 1] == '.') --j;
  return dot && j > at + 3 ? j - i : 0;
}

size_t path_length(std::string_view s, size_t i) {  // /etc/fstab, ~/.config, ./configure
  if (!word_start(s, i)) return 0;
  size_t body = 0;
  if (starts(s, i, "~/") || starts(s, i, "./"))
    body = i + 2;
  else if (s[i] == '/')
    body = i + 1;
  else
    return 0;
  if (body >= s.size() || !(alnum(s[body]) || s[body] == '.' || s[body] == '_')) return 0;
  return run_length(s, i, 2);
}

size_t option_length(std::string_view s, size_t i) {  // --help, -v, --width=N
  if (!word_start(s, i) || s[i] != '-') return 0;
  size_t j = i + 1;
  if (j < s.size() && s[j] == '-') ++j;
  if (j >= s.size() || !alpha(s[j])) return 0;
  while (j < s.size() && (alnum(s[j]) || s[j] == '-' || s[j] == '_')) ++j;
  if (j < s.size() && s[j] == '=') {
    ++j;
    while (j < s.size() && !space(s[j]) && s[j] != ']' && s[j] != ')') ++j;
  }
  // "-based" inside prose is a word, not an option; an option is followed by a boundary.
  if (j < s.size() && !space(s[j]) && static_cast<unsigned char>(s[j]) < 0x80 &&
      std::string_view(",.;:)]").find(s[j]) == std::string_view::npos)
    return 0;
  return j - i;
}

size_t words(std::string_view s) {
  size_t n = 0;
  for (size_t i = 0; i < s.size(); ++i)
    if (!space(s[i]) && (i == 0 || space(s[i - 1]))) ++n;
  return n;
}

std::string sentinel(size_t j) { return "{attnkit" + std::to_string(j) + "}"; }

// The placeholder the model reads in the span's place. The model knows printf and brace
// placeholders, but only as whole tokens; a span it would get in pieces, and every other span,
// reads as an argument of the same kind: "%d" keeps a number a number (the plural's grammar
// hangs on it), "%s" the rest.
std::string mask_of(const std::string& span, const KeepsWhole& whole) {
  if (data::is_placeholder(span) && span != "%%" && (!whole || whole(span))) return span;
  const bool integer = span.size() > 1 && span[0] == '%' && data::is_placeholder(span) &&
                       std::string_view("diouxX").find(span.back()) != std::string_view::npos;
  return integer ? "%d" : "%s";
}

bool has_cjk(std::string_view s) {
  for (char32_t c : text::decode(s))
    if (text::is_cjk(c)) return true;
  return false;
}

std::string strip_trailing_punctuation(std::string s) {
  for (bool again = true; again;) {
    again = false;
    for (std::string_view p : {":", "：", "...", "…", "。", ".", " "})
      if (s.size() > p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0) {
        s.resize(s.size() - p.size());
        again = true;
      }
  }
  return s;
}

}  // namespace

const char* to_string(SpanKind kind) {
  switch (kind) {
    case SpanKind::Placeholder:
      return "placeholder";
    case SpanKind::Variable:
      return "variable";
    case SpanKind::Tag:
      return "markup";
    case SpanKind::Entity:
      return "entity";
    case SpanKind::Url:
      return "url";
    case SpanKind::Email:
      return "email";
    case SpanKind::Path:
      return "path";
    case SpanKind::Option:
      return "option";
    case SpanKind::Identifier:
      return "identifier";
    case SpanKind::Tab:
      return "tab";
  }
  return "?";
}

size_t span_length(std::string_view s, size_t i, SpanKind* kind) {
  if (i >= s.size()) return 0;
  const std::pair<SpanKind, size_t (*)(std::string_view, size_t)> recognisers[] = {
      {SpanKind::Placeholder, printf_length},
      {SpanKind::Variable, variable_length},
      {SpanKind::Tag, tag_length},
      {SpanKind::Entity, entity_length},
      {SpanKind::Url, url_length},
      {SpanKind::Email, email_length},
      {SpanKind::Path, path_length},
      {SpanKind::Option, option_length},
      {SpanKind::Identifier, identifier_length}};
  if (s[i] == '\t') {
    if (kind) *kind = SpanKind::Tab;
    return 1;
  }
  for (const auto& [k, length] : recognisers)
    if (size_t n = length(s, i)) {
      if (kind) *kind = k;
      return n;
    }
  return 0;
}

std::vector<std::string> spans(std::string_view s, std::vector<SpanKind>* kinds) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    SpanKind kind;
    if (size_t n = span_length(s, i, &kind)) {
      out.emplace_back(s.substr(i, n));
      if (kinds) kinds->push_back(kind);
      i += n;
    } else {
      ++i;
    }
  }
  return out;
}

char find_accelerator(std::string_view s, size_t* at) {
  if (words(s) > 6) return 0;
  char found = 0;
  size_t where = 0;
  std::vector<bool> in_span(s.size(), false);  // "$pretty_name", "<no .debug_addr section>"
  for (size_t i = 0; i < s.size();) {
    const size_t n = span_length(s, i);
    for (size_t k = i; k < i + n; ++k) in_span[k] = true;
    i += std::max<size_t>(n, 1);
  }
  for (char marker : {'_', '&', '~'}) {
    for (size_t i = 0; i + 1 < s.size(); ++i) {
      if (s[i] != marker || in_span[i]) continue;
      // A marker before anything but a letter or digit, or a second one, is not an accelerator.
      if (!alnum(s[i + 1]) || found) return 0;
      // Inside a word, GTK's marker sits in a capitalised word before a lowercase letter
      // ("E_xit", "Pre_ferences"); "GTK_THEME", "file_name", "Los_Angeles" are identifiers.
      if (marker == '_' && i > 0 && alnum(s[i - 1])) {
        size_t w = i;
        while (w > 0 && alnum(s[w - 1])) --w;
        if (!std::isupper(static_cast<unsigned char>(s[w])) ||
            !std::islower(static_cast<unsigned char>(s[i + 1])))
          return 0;
      }
      found = marker;
      where = i;
    }
  }
  if (found && at) *at = where;
  return found;
}

std::optional<std::pair<std::string, std::string>> protect_pair(std::string_view source,
                                                                std::string_view target) {
  const Protected p = protect(source, /*accelerators=*/false);
  std::string t(target);
  while (!t.empty() && space(t.back())) t.pop_back();
  t.erase(0, std::min(t.find_first_not_of(" \t\n\r"), t.size()));
  if (t.compare(0, p.open.size(), p.open) != 0) return std::nullopt;
  t.erase(0, p.open.size());
  if (!p.close.empty()) {
    if (t.size() < p.close.size() || t.compare(t.size() - p.close.size(), p.close.size(), p.close))
      return std::nullopt;
    t.resize(t.size() - p.close.size());
  }
  if (!p.suffix.empty())
    for (std::string_view suffix : {"……", "...", "…", "：", ":"})
      if (t.size() > suffix.size() &&
          t.compare(t.size() - suffix.size(), suffix.size(), suffix) == 0) {
        t.resize(t.size() - suffix.size());
        break;
      }
  // The spans the model reads as "%s" are "%s" in the target too (placeholders are themselves on
  // both sides already: corpus gettext drops pairs whose placeholders differ).
  for (const auto& span : p.spans) {
    if (data::is_placeholder(span) && span != "%%") continue;
    const size_t at = t.find(span);
    if (at == std::string::npos) return std::nullopt;
    t.replace(at, span.size(), "%s");
  }
  if (t.empty() || p.text.empty()) return std::nullopt;
  return std::make_pair(p.text, t);
}

Protected protect(std::string_view line, bool accelerators, const KeepsWhole& whole,
                  const Glossary* glossary) {
  Protected p;
  size_t b = 0, e = line.size();
  while (b < e && space(line[b])) ++b;
  while (e > b && space(line[e - 1])) --e;
  p.lead = std::string(line.substr(0, b));
  p.trail = std::string(line.substr(e));
  std::string body(line.substr(b, e - b));
  // Markup around the whole line.
  while (size_t n = tag_length(body, 0)) {
    if (n == body.size()) break;
    p.open += body.substr(0, n);
    body.erase(0, n);
  }
  for (size_t open = body.rfind('<');
       open != std::string::npos && open > 0 && body[open - 1] != '%' &&  // not "%<PRIdMAX>"
       tag_length(body, open) == body.size() - open;
       open = body.rfind('<')) {
    p.close = body.substr(open) + p.close;
    body.resize(open);
  }
  for (std::string_view suffix : {"...", "…", ":"})
    if (body.size() > suffix.size() &&
        body.compare(body.size() - suffix.size(), suffix.size(), suffix) == 0) {
      p.suffix = std::string(suffix);
      body.resize(body.size() - suffix.size());
      break;
    }
  size_t at = 0;
  if (accelerators && (p.accelerator = find_accelerator(body, &at))) {
    p.key = body[at + 1];
    body.erase(at, 1);
  }
  for (size_t i = 0; i < body.size();) {
    SpanKind kind;
    const GlossaryTerm* term = nullptr;
    size_t n = span_length(body, i, &kind);
    if (!n && glossary) n = glossary->term_at(body, i, &term);
    if (n) {
      const std::string span = body.substr(i, n);
      p.spans.push_back(term ? term->target : span);
      p.terms += term != nullptr;
      const std::string mask = term ? "%s" : mask_of(span, whole);
      const bool pad_left = !p.text.empty() && !space(p.text.back()),
                 pad_right = i + n < body.size() && !space(body[i + n]);
      p.text += (pad_left ? " " : "") + mask + (pad_right ? " " : "");
      i += n;
    } else {
      p.text.push_back(body[i++]);
    }
  }
  return p;
}

AcceleratorStyle accelerator_style(const std::string& lang) {
  const std::string base = lang.substr(0, lang.find_first_of("_-@."));
  return base == "zh" || base == "ja" || base == "ko" ? AcceleratorStyle::Appended
                                                      : AcceleratorStyle::Inline;
}

namespace {

// The marker before the first letter of `body` that is not inside a span's sentinel; false
// when it has none (a translation of digits and symbols only).
bool mark_first_letter(std::string& body, char marker) {
  const std::u32string text = text::decode(body);
  size_t byte = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const std::string here = body.substr(byte);
    if (here.rfind("{attnkit", 0) == 0 && here.find('}') != std::string::npos) {
      const size_t skip = here.find('}') + 1;  // ASCII: as many characters as bytes
      byte += skip;
      i += skip - 1;
      continue;
    }
    if (u_isalpha(static_cast<UChar32>(text[i])) || u_isdigit(static_cast<UChar32>(text[i]))) {
      body.insert(byte, 1, marker);
      return true;
    }
    byte += text::encode(text[i]).size();
  }
  return false;
}

}  // namespace

void place_accelerator(std::string& translation, char marker, char key, AcceleratorStyle style) {
  if (style == AcceleratorStyle::Inline && mark_first_letter(translation, marker)) return;
  translation += std::string("(") + marker +
                 static_cast<char>(std::toupper(static_cast<unsigned char>(key))) + ")";
}

std::string restore(const Protected& p, const std::vector<std::string>& target_tokens,
                    const at::Tensor& attention, const std::vector<std::string>& source_tokens,
                    const std::function<std::string(const std::vector<std::string>&)>& detokenize,
                    AcceleratorStyle style) {
  const size_t k = p.spans.size();
  std::vector<int64_t> masks;  // source position of span j's mask
  for (size_t s = 0; s < source_tokens.size() && masks.size() < k; ++s)
    if (data::is_placeholder(source_tokens[s])) masks.push_back(static_cast<int64_t>(s));
  std::vector<size_t> rows;  // target positions of placeholders
  for (size_t t = 0; t < target_tokens.size(); ++t)
    if (data::is_placeholder(target_tokens[t])) rows.push_back(t);
  const bool aligned = attention.defined() && attention.dim() == 2 &&
                       attention.size(0) >= static_cast<int64_t>(target_tokens.size()) &&
                       attention.size(1) >= static_cast<int64_t>(source_tokens.size());
  const at::Tensor a = aligned ? attention.to(at::kFloat).contiguous() : at::Tensor();
  auto weight = [&](size_t row, size_t j) {
    return aligned ? a[static_cast<int64_t>(row)][masks[j]].item<float>() : 0.f;
  };
  // Each output placeholder takes the span whose mask it attended to most (greedy, best pairs
  // first; ties to the earlier span, so that without attention the order is the source's).
  std::vector<std::tuple<float, size_t, size_t>> pairs;
  for (size_t r = 0; r < rows.size(); ++r)
    for (size_t j = 0; j < masks.size(); ++j) pairs.emplace_back(-weight(rows[r], j), j, r);
  std::sort(pairs.begin(), pairs.end());
  std::vector<int> span_of_row(rows.size(), -1);
  std::vector<bool> placed(k, false);
  for (const auto& [w, j, r] : pairs)
    if (span_of_row[r] < 0 && !placed[j]) {
      span_of_row[r] = static_cast<int>(j);
      placed[j] = true;
    }
  // A span the model dropped goes before the token that attended to its mask most.
  std::multimap<size_t, size_t> before;  // target position -> span
  for (size_t j = 0; j < k; ++j) {
    if (placed[j]) continue;
    size_t best = target_tokens.size();
    if (aligned && j < masks.size() && !target_tokens.empty())
      best = static_cast<size_t>(a.narrow(0, 0, static_cast<int64_t>(target_tokens.size()))
                                     .select(1, masks[j])
                                     .argmax()
                                     .item<int64_t>());
    before.emplace(best, j);
  }
  std::vector<std::string> tokens;
  size_t next_row = 0;
  for (size_t t = 0; t <= target_tokens.size(); ++t) {
    for (auto [it, end] = before.equal_range(t); it != end; ++it)
      tokens.push_back(sentinel(it->second));
    if (t == target_tokens.size()) break;
    if (next_row < rows.size() && rows[next_row] == t) {
      if (span_of_row[next_row] >= 0) tokens.push_back(sentinel(span_of_row[next_row]));
      ++next_row;
      continue;
    }
    // A stray "%", "{", "}" or "$" of the model's could make a placeholder that is not in the
    // source (msgfmt --check rejects "%\""): the only ones in the output are the restored spans.
    const auto& token = target_tokens[t];
    if (token.find_first_of("%{}$") != std::string::npos) continue;
    tokens.push_back(token);
  }
  // The model may have swapped "%s ... %d"; a C program would then read its arguments as the
  // wrong types. Sequential conversions go back in the source's order, wherever they stand.
  std::vector<size_t> at, ids;
  for (size_t t = 0; t < tokens.size(); ++t)
    for (size_t j = 0; j < k; ++j)
      if (tokens[t] == sentinel(j) && sequential(p.spans[j])) at.push_back(t), ids.push_back(j);
  std::sort(ids.begin(), ids.end());
  for (size_t n = 0; n < at.size(); ++n) tokens[at[n]] = sentinel(ids[n]);
  std::string body = detokenize(tokens);
  if (!p.suffix.empty()) body = strip_trailing_punctuation(body);
  // Before the spans go back, so that the marker cannot land inside one ("%s").
  if (p.accelerator) place_accelerator(body, p.accelerator, p.key, style);
  for (size_t j = 0; j < k; ++j) {
    const std::string s = sentinel(j);
    const auto at = body.find(s);
    if (at != std::string::npos) body.replace(at, s.size(), p.spans[j]);
  }
  std::string suffix = p.suffix;
  if (suffix == ":" && has_cjk(body)) suffix = "：";  // zh_CN translators write "：" 5 to 1
  return p.lead + p.open + body + suffix + p.close + p.trail;
}

bool survives(std::string_view source, std::string_view translation) {
  // Placeholders and variables: the same multiset (an extra one reads a missing argument),
  // scanned at every position of both. The other spans: each of the source's occurs in the
  // translation as often (as text: a model's stray "-" before "--help" must not hide it).
  auto arguments = [](std::string_view s) {
    std::map<std::string, int> n;
    for (size_t i = 0; i < s.size();) {
      size_t len = printf_length(s, i);
      if (!len && s[i] == '$') len = variable_length(s, i);
      if (len) ++n[std::string(s.substr(i, len))];
      i += std::max<size_t>(len, 1);
    }
    return n;
  };
  if (arguments(source) != arguments(translation)) return false;
  std::vector<SpanKind> kinds;
  const auto all = spans(source, &kinds);
  std::map<std::string, int> needed;
  for (size_t i = 0; i < all.size(); ++i)
    if (kinds[i] != SpanKind::Placeholder && kinds[i] != SpanKind::Variable) ++needed[all[i]];
  for (const auto& [span, n] : needed) {
    int found = 0;
    for (size_t at = translation.find(span); at != std::string_view::npos;
         at = translation.find(span, at + span.size()))
      ++found;
    if (found < n) return false;
  }
  size_t at = 0;
  if (char marker = find_accelerator(source, &at)) {
    // "(_S)" or "_Speichern": the marker before a letter or digit (any script's).
    bool found = false;
    for (size_t m = translation.find(marker); m != std::string_view::npos && !found;
         m = translation.find(marker, m + 1)) {
      const auto rest = text::decode(translation.substr(m + 1, 4));
      found = !rest.empty() && (u_isalpha(static_cast<UChar32>(rest[0])) ||
                                u_isdigit(static_cast<UChar32>(rest[0])));
    }
    if (!found) return false;
  }
  auto lead = [](std::string_view s) { return s.substr(0, s.find_first_not_of(" \t\n")); };
  auto trail = [](std::string_view s) {
    const auto last = s.find_last_not_of(" \t\n");
    return last == std::string_view::npos ? s : s.substr(last + 1);
  };
  return lead(source) == lead(translation) && trail(source) == trail(translation);
}

}  // namespace attnkit::po
