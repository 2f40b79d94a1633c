#include "attnkit/po/glossary.h"

#include <algorithm>
#include <cctype>
#include <fstream>
#include <set>
#include <sstream>

#include "attnkit/core/error.h"
#include "attnkit/data/text.h"
#include "attnkit/po/protect.h"

namespace attnkit::po {
namespace {

bool word_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c < 0; }

// A record's cells and the line it starts on.
struct Record {
  std::vector<std::string> cells;
  size_t line = 0;
};

std::vector<Record> csv_records(std::string_view text) {
  std::vector<Record> out;
  Record r{{""}, 1};
  size_t line = 1;
  bool quoted = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quoted) {
      if (c == '"' && i + 1 < text.size() && text[i + 1] == '"') {
        r.cells.back() += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        line += c == '\n';
        r.cells.back() += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      r.cells.emplace_back();
    } else if (c == '\n') {
      out.push_back(std::move(r));
      r = Record{{""}, ++line};
    } else if (c != '\r') {
      r.cells.back() += c;
    }
  }
  if (r.cells.size() > 1 || !r.cells[0].empty()) out.push_back(std::move(r));
  return out;
}

std::vector<Record> tsv_records(std::string_view text) {
  std::vector<Record> out;
  std::istringstream in{std::string(text)};
  std::string row;
  for (size_t line = 1; std::getline(in, row); ++line) {
    if (!row.empty() && row.back() == '\r') row.pop_back();
    Record r{{}, line};
    std::istringstream cells(row);
    for (std::string cell; std::getline(cells, cell, '\t');) r.cells.push_back(cell);
    out.push_back(std::move(r));
  }
  return out;
}

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t");
  return b == std::string::npos ? "" : s.substr(b, s.find_last_not_of(" \t") - b + 1);
}

// Lower-cased, the accelerator removed: "(_F)" after a label, or the marker before a letter.
std::string comparable(std::string_view s) {
  std::string t(s);
  for (size_t at = t.find("(_"); at != std::string::npos; at = t.find("(_", at)) {
    if (at + 3 < t.size() && t[at + 3] == ')')
      t.erase(at, 4);
    else
      ++at;
  }
  size_t at = 0;
  if (find_accelerator(t, &at)) t.erase(at, 1);
  return text::unicode_lower(t);
}

// A term and its plurals ("+s", "+es", or "y" -> "ies"), lower-cased, longest first.
std::vector<std::string> forms_of(const std::string& term) {
  std::vector<std::string> forms = {term + "es", term + "s", term};
  if (term.size() > 1 && term.back() == 'y')
    forms.insert(forms.begin(), term.substr(0, term.size() - 1) + "ies");
  return forms;
}

}  // namespace

Glossary Glossary::parse(std::string_view text, const std::string& path, bool csv) {
  text = text::strip_bom(text);
  Glossary g;
  const auto records = csv ? csv_records(text) : tsv_records(text);
  static const std::set<std::string> kHeaders = {"source",  "term",  "en",
                                                 "english", "msgid", "source term"};
  for (size_t i = 0; i < records.size(); ++i) {
    const auto& r = records[i];
    const std::string first = trim(r.cells.empty() ? "" : r.cells[0]);
    if (r.cells.size() <= 1 && first.empty()) continue;  // a blank line
    if (first.rfind('#', 0) == 0) continue;
    if (i == 0 && kHeaders.count(text::ascii_lower(first))) continue;
    const std::string second = r.cells.size() > 1 ? trim(r.cells[1]) : "";
    if (first.empty() || second.empty())
      throw Error(path + ":" + std::to_string(r.line) +
                  ": a glossary line needs a term and its translation, " +
                  (csv ? "separated by a comma" : "separated by a tab"));
    if (!text::valid_utf8(first) || !text::valid_utf8(second))
      throw Error(path + ":" + std::to_string(r.line) + ": invalid UTF-8");
    g.terms_.push_back({first, second, r.line});
    g.lowered_.push_back(text::unicode_lower(first));
  }
  return g;
}

Glossary Glossary::read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot read the glossary");
  std::ostringstream bytes;
  bytes << in.rdbuf();
  const bool csv = path.size() >= 4 && text::ascii_lower(path.substr(path.size() - 4)) == ".csv";
  return parse(bytes.str(), path, csv);
}

std::vector<const GlossaryTerm*> Glossary::found_in(std::string_view message) const {
  const std::string m = comparable(message);
  std::vector<const GlossaryTerm*> out;
  for (size_t t = 0; t < terms_.size(); ++t) {
    bool found = false;
    for (const auto& form : forms_of(lowered_[t])) {
      for (size_t at = m.find(form); !found && at != std::string::npos; at = m.find(form, at + 1)) {
        const bool starts = at == 0 || !word_char(m[at - 1]);
        const size_t end = at + form.size();
        found = starts && (end == m.size() || !word_char(m[end]));
      }
      if (found) break;
    }
    if (found) out.push_back(&terms_[t]);
  }
  return out;
}

size_t Glossary::term_at(std::string_view s, size_t i, const GlossaryTerm** term) const {
  if (i >= s.size() || !word_char(s[i]) || (i > 0 && word_char(s[i - 1]))) return 0;
  size_t best = 0;
  for (size_t t = 0; t < terms_.size(); ++t)
    for (const auto& form : forms_of(lowered_[t])) {
      const size_t end = i + form.size();
      if (form.size() <= best || end > s.size() || (end < s.size() && word_char(s[end]))) continue;
      if (text::ascii_lower(s.substr(i, form.size())) != form) continue;
      best = form.size();
      if (term) *term = &terms_[t];
    }
  return best;
}

bool Glossary::carries(std::string_view translation, const GlossaryTerm& term) {
  return comparable(translation).find(text::unicode_lower(term.target)) != std::string::npos;
}

}  // namespace attnkit::po
