#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "attnkit/data/po_catalog.h"
#include "attnkit/po/glossary.h"

// `attnkit po check`: what a reviewer looks for in a catalog, human- or machine-translated, each
// finding at its entry's line. The checks need no model.
namespace attnkit::po {

enum class CheckKind {
  Placeholders,  // printf, brace and shell placeholders: not the source's multiset
  Spans,         // markup, entities, URLs, e-mail addresses, paths, options the source has
  Accelerator,   // the source's accelerator has no marker before a letter, or several
  Identical,     // a translation that is its source (a sentence of two or more words)
  Untranslated,  // an English word of the source left in a Chinese, Japanese or Korean target
  Repeated,      // the same word twice in a row, where the source has no such pair
  Punctuation,   // a trailing colon, ellipsis or question mark the translation lacks
  Whitespace,    // leading or trailing whitespace (a final newline included) that differs
  PluralNumber,  // a plural form without the number, where its form serves several numbers
  Glossary,      // a glossary term of the source whose agreed translation the target lacks
};
const char* to_string(CheckKind kind);

struct Finding {
  size_t line = 0;  // of the entry's msgid
  CheckKind kind;
  std::string message;
};

struct CheckOptions {
  std::string lang;                    // the catalog's language; empty: its header's
  bool fuzzy = false;                  // check fuzzy entries too (msgfmt ignores them)
  const Glossary* glossary = nullptr;  // the terms to check (po/glossary.h)
};

// Every finding in the catalog's translated entries, in line order.
std::vector<Finding> check(const data::PoCatalog& catalog, const CheckOptions& options = {});

}  // namespace attnkit::po
