#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "attnkit/data/corpus.h"

// Filters for corpora gathered from thousands of catalogs, where a few translators' slips are
// many pairs: a target in the wrong script, a target far longer or shorter than its source.
namespace attnkit::data {

// The scripts a language is written in (ICU's, from the locale: zh_CN Han; ja Katakana,
// Hiragana and Han; sr Cyrillic; sr@latin, as gettext names it, Latin).
class ScriptCheck {
 public:
  explicit ScriptCheck(const std::string& lang);
  // False when the language is written in Latin letters: an English string left in a de
  // catalog has no script of its own to tell it by.
  bool applies() const { return applies_; }
  // Whether `target` has a letter in one of the language's scripts (a zh_CN target of ASCII
  // only is an English string left untranslated). Always true when the check does not apply.
  bool accepts(std::string_view target) const;
  const std::vector<int>& scripts() const { return scripts_; }  // UScriptCode values

 private:
  std::vector<int> scripts_;
  bool applies_ = false;
};

// Drops pairs whose length ratio (target characters per source character) is more than
// `factor` times away from the corpus's median ratio, either way. Sources shorter than
// `min_source_chars` are kept whatever their ratio: a short label's translation may rightly be
// twice or half its length. Returns how many went.
size_t filter_length_ratio(std::vector<Pair>& pairs, double factor, size_t min_source_chars = 16);

// The median of target/source character counts (1 for no pairs).
double median_length_ratio(const std::vector<Pair>& pairs);

// The test filter_length_ratio applies to one pair, given the median.
bool length_ratio_outlier(const Pair& pair, double median, double factor,
                          size_t min_source_chars = 16);

}  // namespace attnkit::data
