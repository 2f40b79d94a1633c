#pragma once

#include <string>
#include <string_view>
#include <vector>

// A project's glossary: the translation its translators agreed for each term ("file" ->
// "Datei"), as Weblate and Poedit export it, and where a translation lacks one.
//
// Terms are found as translators' tools find them: case-insensitively, at word boundaries, in
// the plural too ("files" is the term "file"), with a label's accelerator set aside ("_File").
// A translation carries the term when it contains the term's target, case-insensitively and
// accelerators aside: a substring, so that German's inflections ("Dateien") and Chinese text
// without spaces count. `po check --glossary` reports each entry that lacks one
// (tests/test_po_glossary.cpp).
namespace attnkit::po {

struct GlossaryTerm {
  std::string source, target;
  size_t line = 0;  // in the glossary file
};

class Glossary {
 public:
  // A two-column TSV or CSV file (by the extension: .csv is RFC 4180, quotes and all; anything
  // else splits at tabs), source then target, further columns ignored, a header row ("source",
  // "term", "en" ... as its first cell) skipped, blank lines and lines starting with '#' too.
  // A line without two non-empty cells is an attnkit::Error naming path:line.
  static Glossary read(const std::string& path);
  static Glossary parse(std::string_view text, const std::string& path, bool csv);

  const std::vector<GlossaryTerm>& terms() const { return terms_; }
  // The terms `message` contains, in glossary order, each once.
  std::vector<const GlossaryTerm*> found_in(std::string_view message) const;
  // The length of the term (or its plural) that starts at s[i], as a whole word, case aside,
  // and the term in `term`; the longest when several do; 0 when none.
  size_t term_at(std::string_view s, size_t i, const GlossaryTerm** term = nullptr) const;
  // Whether `translation` carries the term's target.
  static bool carries(std::string_view translation, const GlossaryTerm& term);

 private:
  std::vector<GlossaryTerm> terms_;
  std::vector<std::string> lowered_;  // each term's source, lower-cased
};

}  // namespace attnkit::po
