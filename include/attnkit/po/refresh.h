#pragma once

#include <optional>
#include <string>
#include <vector>

#include "attnkit/data/po_catalog.h"
#include "attnkit/po/protect.h"

// Fuzzy entries whose English changed (`attnkit po translate --refresh-fuzzy`).
//
// When a package's English changes, msgmerge --previous keeps each changed entry's translation,
// marks it fuzzy and writes the msgid it translated as "#| msgid". Most of these changes are
// cosmetic: "Open" became "Open…", "%s of %s" became "%1$s of %2$s", "_Save" became "Sa_ve", a
// trailing space or line break went. The translation then needs the same change, not a new
// translator's look: refresh() carries it across, changing in it exactly what changed in the
// English (its whitespace at either end, its trailing punctuation in the translation's own
// width, its placeholders renumbered by position, its accelerator placed or taken out as the
// language places them). Any other change (a word, the context) is not cosmetic: the entry gets
// a new suggestion and keeps its old translation in a comment.
// tests/test_po_refresh.cpp holds each kind of change, and tests/cli/test_po.py a catalog
// msgmerge made, checked by msgfmt --check.
namespace attnkit::po {

struct Refresh {
  // What changed between the previous msgid (and plural) and the current one, in this order:
  // "whitespace", "punctuation", "placeholders", "accelerator"; or "context" / "words".
  std::vector<std::string> changes;
  bool cosmetic = false;            // only the first four changed, and the translation follows
  std::vector<std::string> msgstr;  // cosmetic: the translation carried over, one per form
  int similarity = 0;               // the previous msgid's to the current one (po::similarity)
};

// nullopt unless `e` is fuzzy, translated and has a previous msgid (#| msgid). Punctuation
// follows the translation's own width ("。" after "打开", "." after "Öffnen").
std::optional<Refresh> refresh(const data::PoEntry& e, AcceleratorStyle style);

// One string's translation carried from `before` to `after` (the English it translated and the
// English now), or nullopt when the change is not cosmetic or the translation cannot follow it
// (its placeholders are not those of `before`). `changes` gets what changed.
std::optional<std::string> carry_over(const std::string& before, const std::string& after,
                                      const std::string& translation, AcceleratorStyle style,
                                      std::vector<std::string>* changes = nullptr);

}  // namespace attnkit::po
