#include "attnkit/po/check.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "attnkit/core/error.h"
#include "attnkit/data/plural_forms.h"
#include "attnkit/data/text.h"
#include "attnkit/po/protect.h"

namespace attnkit::po {
namespace {

bool cjk_language(const std::string& lang) {
  const std::string base = lang.substr(0, lang.find_first_of("_-@."));
  return base == "zh" || base == "ja" || base == "ko";
}

// The spans of `s` of the placeholder kinds (printf, brace, shell), positional ones by type
// (a translation may reorder %1$s and %2$d), and the other kinds, each as a multiset.
struct Spans {
  std::map<std::string, int> arguments, others;
};

Spans spans_of(const std::string& s) {
  std::vector<SpanKind> kinds;
  const auto all = spans(s, &kinds);
  Spans out;
  for (size_t i = 0; i < all.size(); ++i) {
    if (kinds[i] == SpanKind::Placeholder || kinds[i] == SpanKind::Variable) {
      std::string a = all[i];
      const auto dollar = a.find('$');
      if (a[0] == '%' && dollar != std::string::npos) a = "%" + a.substr(dollar + 1);
      ++out.arguments[a];
    } else if (kinds[i] != SpanKind::Identifier && kinds[i] != SpanKind::Tab) {
      ++out.others[all[i]];
    }
  }
  return out;
}

std::string list(const std::map<std::string, int>& m) {
  std::string out;
  for (const auto& [k, n] : m)
    for (int i = 0; i < n; ++i) out += (out.empty() ? "" : " ") + k;
  return out.empty() ? "none" : out;
}

std::vector<std::string> words(const std::string& s) {
  std::vector<std::string> out;
  std::string w;
  for (char c : s) {
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '\'') {
      w += c;
    } else {
      if (!w.empty()) out.push_back(w);
      w.clear();
    }
  }
  if (!w.empty()) out.push_back(w);
  return out;
}

// The same word twice in a row ("the the"), case-insensitively.
std::set<std::string> doubled(const std::string& s) {
  std::set<std::string> out;
  std::istringstream in(s);
  std::string prev, w;
  while (in >> w) {
    std::string bare;
    for (char c : w)
      if (!std::ispunct(static_cast<unsigned char>(c))) bare += static_cast<char>(std::tolower(c));
    if (bare.size() >= 2 && bare == prev) out.insert(bare);
    prev = bare;
  }
  return out;
}

std::string ending(const std::string& s) {
  const auto last = s.find_last_not_of(" \t\n");
  const std::string t = last == std::string::npos ? "" : s.substr(0, last + 1);
  for (const char* e : {"...", "\xe2\x80\xa6", ":", "\xef\xbc\x9a", "?", "\xef\xbc\x9f"})
    if (t.size() >= std::string(e).size() &&
        t.compare(t.size() - std::string(e).size(), std::string::npos, e) == 0)
      return e;
  return "";
}

// The family of an ending: a colon in either width, an ellipsis in either form.
std::string family(const std::string& e) {
  if (e == ":" || e == "\xef\xbc\x9a") return "colon";
  if (e == "..." || e == "\xe2\x80\xa6") return "ellipsis";
  if (e == "?" || e == "\xef\xbc\x9f") return "question mark";
  return "";
}

std::string lead(const std::string& s) { return s.substr(0, s.find_first_not_of(" \t\n")); }
std::string trail(const std::string& s) {
  const auto last = s.find_last_not_of(" \t\n");
  return last == std::string::npos ? s : s.substr(last + 1);
}

// One msgstr against the English it translates.
// `singular`: a plural form for one number alone, which may leave the number out (msgfmt allows
// it: "Eine Datei" for "%d file"), but may add no placeholder of its own.
void check_text(const std::string& source, const std::string& target, bool cjk, size_t line,
                std::vector<Finding>& out, bool singular = false) {
  const Spans s = spans_of(source), t = spans_of(target);
  bool within = true;
  for (const auto& [a, n] : t.arguments) {
    auto it = s.arguments.find(a);
    within = within && it != s.arguments.end() && it->second >= n;
  }
  if (singular ? !within : s.arguments != t.arguments)
    out.push_back({line, CheckKind::Placeholders,
                   "placeholders " + list(t.arguments) + ", the source has " + list(s.arguments)});
  for (const auto& [span, n] : s.others) {
    auto it = t.others.find(span);
    if (it == t.others.end() || it->second < n)
      out.push_back({line, CheckKind::Spans, "'" + span + "' of the source is missing"});
  }
  size_t at = 0;
  if (const char marker = find_accelerator(source, &at)) {
    size_t markers = 0;
    bool before_letter = false;
    for (size_t m = target.find(marker); m != std::string::npos; m = target.find(marker, m + 1)) {
      ++markers;
      const auto next = text::decode(target.substr(m + 1, 4));
      before_letter = before_letter ||
                      (!next.empty() && (next[0] > 127 || std::isalnum(static_cast<int>(next[0]))));
    }
    if (!before_letter || markers > 1)
      out.push_back({line, CheckKind::Accelerator,
                     markers > 1
                         ? "more than one accelerator marker '" + std::string(1, marker) + "'"
                         : "no accelerator: the source has '" + source.substr(at, 2) + "'"});
  }
  if (source == target && words(source).size() >= 2)
    out.push_back({line, CheckKind::Identical, "the translation is the source"});
  if (cjk && source != target) {
    const auto src_words = words(source);
    const std::set<std::string> english(src_words.begin(), src_words.end());
    for (const auto& w : words(target))
      if (w.size() >= 4 && english.count(w) &&
          std::all_of(w.begin(), w.end(), [](char c) { return std::islower(c) || c == '\''; })) {
        out.push_back({line, CheckKind::Untranslated, "'" + w + "' is left in English"});
        break;
      }
  }
  const auto src_doubled = doubled(source);
  for (const auto& w : doubled(target))
    if (!src_doubled.count(w)) {
      out.push_back({line, CheckKind::Repeated, "'" + w + " " + w + "'"});
      break;
    }
  const std::string se = family(ending(source)), te = family(ending(target));
  if (!se.empty() && se != te)
    out.push_back({line, CheckKind::Punctuation,
                   "the source ends with a " + se +
                       ", the "
                       "translation does not"});
  if (lead(source) != lead(target) || trail(source) != trail(target))
    out.push_back(
        {line, CheckKind::Whitespace, "leading or trailing whitespace differs from the source's"});
}

}  // namespace

const char* to_string(CheckKind kind) {
  switch (kind) {
    case CheckKind::Placeholders:
      return "placeholders";
    case CheckKind::Spans:
      return "spans";
    case CheckKind::Accelerator:
      return "accelerator";
    case CheckKind::Identical:
      return "identical";
    case CheckKind::Untranslated:
      return "untranslated";
    case CheckKind::Repeated:
      return "repeated";
    case CheckKind::Punctuation:
      return "punctuation";
    case CheckKind::Whitespace:
      return "whitespace";
    case CheckKind::PluralNumber:
      return "plural-number";
    case CheckKind::Glossary:
      return "glossary";
  }
  return "?";
}

namespace {

// Each glossary term of `source` whose agreed translation `target` lacks.
void check_glossary(const Glossary& glossary, const std::string& source, const std::string& target,
                    size_t line, const std::string& form, std::vector<Finding>& out) {
  for (const GlossaryTerm* term : glossary.found_in(source))
    if (!Glossary::carries(target, *term))
      out.push_back({line, CheckKind::Glossary,
                     form + "\"" + term->source + "\" is \"" + term->target +
                         "\" in the glossary (line " + std::to_string(term->line) + ")"});
}

}  // namespace

std::vector<Finding> check(const data::PoCatalog& catalog, const CheckOptions& options) {
  const std::string lang = options.lang.empty() ? catalog.header_field("Language") : options.lang;
  const bool cjk = cjk_language(lang);
  std::optional<data::PluralForms> rule;
  const std::string forms = catalog.header_field("Plural-Forms");
  // read() has refused a broken rule where an entry has plural forms; without one msgfmt reads
  // no rule (binutils' ja catalog spells it "nulurals=1"), and neither does this.
  const bool plurals = std::any_of(catalog.entries().begin(), catalog.entries().end(),
                                   [](const data::PoEntry& e) { return e.plural(); });
  if (plurals && !forms.empty() && forms.find("INTEGER") == std::string::npos)
    rule = data::PluralForms::parse(forms);
  std::vector<Finding> out;
  for (const auto& e : catalog.entries()) {
    if (e.obsolete || e.is_header() || !e.translated()) continue;
    if (e.fuzzy() && !options.fuzzy) continue;
    if (!e.plural()) {
      check_text(e.msgid, e.msgstr[0], cjk, e.line, out);
      if (options.glossary)
        check_glossary(*options.glossary, e.msgid, e.msgstr[0], e.line, "", out);
      continue;
    }
    const int n = static_cast<int>(e.msgstr.size());
    for (int f = 0; f < n; ++f) {
      // The form of 1 translates the singular where it serves 1 alone; every other form the
      // plural, whose numbers it must print.
      const bool singular = n > 1 && rule && f == rule->form(1) && rule->only_one_number(f);
      const std::string& source = singular ? e.msgid : e.msgid_plural;
      const size_t before = out.size();
      check_text(source, e.msgstr[f], cjk, e.line, out, singular);
      for (size_t i = before; i < out.size(); ++i)
        if (out[i].kind == CheckKind::Placeholders) {
          out[i].kind = CheckKind::PluralNumber;
          out[i].message = "msgstr[" + std::to_string(f) + "]: " + out[i].message;
        }
      if (options.glossary)
        check_glossary(*options.glossary, source, e.msgstr[f], e.line,
                       "msgstr[" + std::to_string(f) + "]: ", out);
    }
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const Finding& a, const Finding& b) { return a.line < b.line; });
  return out;
}

}  // namespace attnkit::po
