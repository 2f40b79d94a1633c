#include "attnkit/po/refresh.h"

#include <algorithm>
#include <cctype>
#include <map>

#include "attnkit/data/text.h"
#include "attnkit/data/tokenizer.h"
#include "attnkit/po/fuzzy_memory.h"

namespace attnkit::po {
namespace {

constexpr const char* kBlank = " \t\n";
// The trailing punctuation a message's change may add or take away, and its full-width forms.
constexpr const char* kAsciiPunctuation = ".:!?;,";
constexpr const char* kEllipsis = "\xe2\x80\xa6";  // …
const char* const kWide[] = {"\xe3\x80\x82", "\xef\xbc\x9a", "\xef\xbc\x81",
                             "\xef\xbc\x9f", "\xef\xbc\x9b", "\xef\xbc\x8c"};  // 。：！？；，

bool ends_with(const std::string& s, size_t end, const char* suffix) {
  const size_t n = std::char_traits<char>::length(suffix);
  return end >= n && s.compare(end - n, n, suffix) == 0;
}

// The length of the run of punctuation `s` ends with.
size_t punctuation_tail(const std::string& s) {
  size_t end = s.size();
  while (end > 0) {
    const char c = s[end - 1];
    if (c != '\0' && std::char_traits<char>::find(kAsciiPunctuation, 6, c)) {
      --end;
      continue;
    }
    const char* wide = ends_with(s, end, kEllipsis) ? kEllipsis : nullptr;
    for (const char* w : kWide)
      if (!wide && ends_with(s, end, w)) wide = w;
    if (!wide) break;
    end -= std::char_traits<char>::length(wide);
  }
  return s.size() - end;
}

bool has_wide(const std::string& s) {
  return std::any_of(std::begin(kWide), std::end(kWide),
                     [&](const char* w) { return s.find(w) != std::string::npos; });
}

bool has_cjk(const std::string& s) {
  const auto chars = text::decode(s);
  return std::any_of(chars.begin(), chars.end(), [](char32_t c) { return text::is_cjk(c); });
}

// A message taken apart: whitespace at either end, the accelerator, the trailing punctuation,
// the placeholders; the skeleton is what is left, each placeholder as \x01.
struct Shape {
  std::string lead, trail, punctuation, skeleton;
  std::vector<std::string> placeholders;
  char marker = 0, key = 0;
};

// Splits off the whitespace at either end: returns the core.
std::string split_blanks(const std::string& s, std::string& lead, std::string& trail) {
  const size_t first = s.find_first_not_of(kBlank);
  if (first == std::string::npos) {
    lead = s;
    trail.clear();
    return "";
  }
  const size_t last = s.find_last_not_of(kBlank);
  lead = s.substr(0, first);
  trail = s.substr(last + 1);
  return s.substr(first, last + 1 - first);
}

Shape shape_of(const std::string& s) {
  Shape sh;
  std::string core = split_blanks(s, sh.lead, sh.trail);
  size_t at = 0;
  if ((sh.marker = find_accelerator(core, &at))) {
    sh.key = core[at + 1];
    core.erase(at, 1);
  }
  const size_t p = punctuation_tail(core);
  sh.punctuation = core.substr(core.size() - p);
  core.resize(core.size() - p);
  for (size_t i = 0; i < core.size();) {
    if (const size_t n = data::placeholder_length(core, i)) {
      sh.placeholders.push_back(core.substr(i, n));
      sh.skeleton += '\x01';
      i += n;
    } else {
      sh.skeleton += core[i++];
    }
  }
  return sh;
}

// The English punctuation `p` as the translation writes punctuation: full-width when its own
// trailing punctuation `had` is, or, when that says nothing, when it is written in CJK (as
// po::restore writes "："); "..." as "…" when the translation wrote "…".
std::string localize(const std::string& p, const std::string& had, const std::string& core) {
  const bool ascii = had.find_first_of(kAsciiPunctuation) != std::string::npos;
  const bool wide = has_wide(had) || (!ascii && has_cjk(core));
  std::string out;
  for (size_t i = 0; i < p.size();) {
    if (p.compare(i, 3, "...") == 0) {
      out += had.find(kEllipsis) != std::string::npos ? kEllipsis : "...";
      i += 3;
      continue;
    }
    const char* c = std::char_traits<char>::find(kAsciiPunctuation, 6, p[i]);
    if (wide && c) {
      out += kWide[std::string(kAsciiPunctuation).find(*c)];
      ++i;
      continue;
    }
    out += p[i++];
  }
  return out;
}

// Takes the accelerator out of a translation: the appended "(_K)" with the blank before it, or
// the marker before a letter.
void remove_accelerator(std::string& t, char marker) {
  const size_t open = t.find(std::string("(") + marker);
  if (open != std::string::npos && open + 3 < t.size() && t[open + 3] == ')') {
    size_t from = open;
    while (from > 0 && t[from - 1] == ' ') --from;
    t.erase(from, open + 4 - from);
    return;
  }
  for (size_t m = t.find(marker); m != std::string::npos; m = t.find(marker, m + 1))
    if (m + 1 < t.size() && t[m + 1] != ' ' && t[m + 1] != marker) {
      t.erase(m, 1);
      return;
    }
}

bool positional(const std::string& placeholder) {
  return placeholder[0] != '%' || placeholder.find('$') != std::string::npos ||
         (placeholder.size() > 1 && placeholder[1] == '(');
}

// The translation's placeholders renamed as the English's were, position for position: a
// placeholder that always became the same one is renamed wherever it is (the translation may
// have moved it); an unnumbered one ("%s" twice, now "%1$s" and "%2$s") by its order, which
// printf makes the translation keep. nullopt when the translation has a placeholder the English
// had not, or the renaming is not one (a numbered one that became two different ones).
std::optional<std::string> renumber(const std::string& t, const std::vector<std::string>& before,
                                    const std::vector<std::string>& after) {
  std::map<std::string, std::vector<std::string>> to;
  for (size_t i = 0; i < before.size(); ++i) to[before[i]].push_back(after[i]);
  std::map<std::string, size_t> seen;
  std::string out;
  size_t last = 0;
  for (size_t i = 0; i < t.size();) {
    const size_t n = data::placeholder_length(t, i);
    if (!n) {
      ++i;
      continue;
    }
    const std::string token = t.substr(i, n);
    const auto it = to.find(token);
    if (it == to.end()) return std::nullopt;
    const auto& targets = it->second;
    const bool one = std::all_of(targets.begin(), targets.end(),
                                 [&](const std::string& x) { return x == targets[0]; });
    size_t k = seen[token]++;
    if (!one && (positional(token) || k >= targets.size())) return std::nullopt;
    out += t.substr(last, i - last) + (one ? targets[0] : targets[k]);
    i += n;
    last = i;
  }
  for (const auto& [token, n] : seen)
    if (!positional(token) && n != to[token].size() && to[token].size() > 1) return std::nullopt;
  return out + t.substr(last);
}

void note(std::vector<std::string>* changes, const char* change) {
  if (changes && std::find(changes->begin(), changes->end(), change) == changes->end())
    changes->push_back(change);
}

}  // namespace

std::optional<std::string> carry_over(const std::string& before, const std::string& after,
                                      const std::string& translation, AcceleratorStyle style,
                                      std::vector<std::string>* changes) {
  const Shape a = shape_of(before), b = shape_of(after);
  if (text::squeeze_spaces(a.skeleton) != text::squeeze_spaces(b.skeleton)) {
    note(changes, "words");
    return std::nullopt;
  }
  if (a.lead != b.lead || a.trail != b.trail || a.skeleton != b.skeleton)
    note(changes, "whitespace");
  if (a.punctuation != b.punctuation) note(changes, "punctuation");
  if (a.placeholders != b.placeholders) note(changes, "placeholders");
  if (a.marker != b.marker || std::tolower(a.key) != std::tolower(b.key))
    note(changes, "accelerator");

  // The translation taken apart as the English was, each part changed as the English's did.
  std::string lead, trail;
  std::string core = split_blanks(translation, lead, trail);
  if (a.lead != b.lead) lead = b.lead;
  if (a.trail != b.trail) trail = b.trail;
  const size_t p = punctuation_tail(core);
  std::string punctuation = core.substr(core.size() - p);
  core.resize(core.size() - p);
  if (a.punctuation != b.punctuation) {
    const bool dropped = punctuation.empty() && !a.punctuation.empty();  // the translator's way
    punctuation = dropped ? "" : localize(b.punctuation, punctuation, core);
    if (punctuation.empty())  // "Ouvrir …" -> "Ouvrir": no blank left before nothing
      while (!core.empty() && core.back() == ' ') core.pop_back();
  }
  if (a.marker && !b.marker) {
    remove_accelerator(core, a.marker);
  } else if (b.marker && (a.marker != b.marker || core.find(b.marker) == std::string::npos)) {
    if (a.marker) remove_accelerator(core, a.marker);
    place_accelerator(core, b.marker, b.key, style);
  }
  if (a.placeholders != b.placeholders) {
    auto renamed = renumber(core, a.placeholders, b.placeholders);
    if (!renamed) {
      note(changes, "placeholders");
      return std::nullopt;
    }
    core = std::move(*renamed);
  }
  std::string out = lead + core + punctuation + trail;
  // What the translation carried of the English's spans, it still carries.
  if (survives(before, translation) && !survives(after, out)) return std::nullopt;
  return out;
}

std::optional<Refresh> refresh(const data::PoEntry& e, AcceleratorStyle style) {
  if (e.obsolete || !e.fuzzy() || !e.has_previous || !e.translated()) return std::nullopt;
  Refresh r;
  r.similarity = similarity(text::decode(e.previous_msgid), text::decode(e.msgid));
  if (e.previous_has_context != e.has_context || e.previous_context != e.context)
    r.changes.push_back("context");
  if (e.plural() != !e.previous_msgid_plural.empty()) note(&r.changes, "words");
  if (!r.changes.empty()) return r;
  bool carried = true;
  for (size_t f = 0; f < e.msgstr.size(); ++f) {
    // A plural entry's first form translates the singular, unless it is the only one.
    const bool plural = e.plural() && (f > 0 || e.msgstr.size() == 1);
    const std::string& before = plural ? e.previous_msgid_plural : e.previous_msgid;
    const std::string& after = plural ? e.msgid_plural : e.msgid;
    auto t = carry_over(before, after, e.msgstr[f], style, &r.changes);
    carried = carried && t.has_value();
    r.msgstr.push_back(t ? std::move(*t) : e.msgstr[f]);
  }
  r.cosmetic = carried;
  if (!carried) r.msgstr.clear();
  return r;
}

}  // namespace attnkit::po
