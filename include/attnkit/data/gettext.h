#pragma once

#include <string>
#include <vector>

#include "attnkit/data/corpus.h"

// Human translations from gettext catalogs: every Debian machine has them under
// /usr/share/locale, which makes them attnkit's built-in corpus.
namespace attnkit::data {

struct CatalogEntry {
  std::string context;  // msgctxt, empty when none
  std::string msgid;
  std::string msgid_plural;
  std::vector<std::string> msgstr;  // one per plural form
  bool fuzzy = false;
};

// A compiled catalog (.mo, either byte order). Throws attnkit::Error naming the file.
std::vector<CatalogEntry> read_mo(const std::string& path);
// A source catalog (.po): contexts, plurals, continuation lines, escapes and #, fuzzy.
// Syntax errors name file:line.
std::vector<CatalogEntry> read_po(const std::string& path);

struct GettextReport {
  size_t catalogs = 0, entries = 0, pairs = 0;
  size_t untranslated = 0, fuzzy = 0, plural = 0, context = 0, placeholder_mismatch = 0,
         identical = 0, unreadable = 0, mnemonics = 0;
  std::vector<std::string> problems;
};

// One English -> translation pair per message. A plural entry gives (msgid, msgstr[0]) and
// (msgid_plural, msgstr[1]); in a language of one form (the header's nplurals=1, as zh and ja)
// its one msgstr translates the plural, and gives (msgid_plural, msgstr[0]). Contexts are
// dropped (the message text is kept); untranslated, fuzzy and identical (copied through
// untranslated) entries are skipped;
// a pair whose placeholders (%s, %1$d, {name}) differ between the sides is skipped; mnemonic
// markers (_File / "文件(_F)") are removed from both sides. All skips are counted.
std::vector<Pair> pairs_from_catalog(const std::vector<CatalogEntry>& entries,
                                     GettextReport& report);

// The header's nplurals (its Plural-Forms), 0 when it has none.
int header_nplurals(const std::vector<CatalogEntry>& entries);

// Every <root>/<lang>/LC_MESSAGES/*.mo and every *.po under <root> whose name or folder names
// `lang`, for each root, in sorted order (deterministic).
std::vector<std::string> find_catalogs(const std::string& lang,
                                       const std::vector<std::string>& roots);

}  // namespace attnkit::data
