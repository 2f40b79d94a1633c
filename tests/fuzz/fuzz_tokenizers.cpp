// Every built-in tokenizer and the text helpers on any bytes: tokenize, detokenize, and
// sacreBLEU's tokenizers (13a, zh, intl, char). Invariant: valid UTF-8 in, valid UTF-8 out.

#include <cstdlib>

#include "attnkit/data/text.h"
#include "attnkit/data/tokenizer.h"
#include "attnkit/eval/metrics.h"
#include "fuzz_input.h"

namespace {

void require_utf8(const std::string& s) {
  if (!attnkit::text::valid_utf8(s)) std::abort();
}

}  // namespace

ATTNKIT_FUZZ_TARGET(tokenizers) {
  using namespace attnkit;
  const std::string input(reinterpret_cast<const char*>(data), size);
  static const auto tokenizers = [] {
    std::vector<std::unique_ptr<data::Tokenizer>> t;
    for (const char* spec : {"en", "en-lower", "en-norm", "zh"}) t.push_back(data::make_tokenizer(spec));
    return t;
  }();
  data::placeholders(input);
  const bool utf8 = text::valid_utf8(input);
  if (!utf8) return 0;  // the readers refuse invalid UTF-8 before any tokenizer sees it
  for (const auto& tokenizer : tokenizers) {
    const auto tokens = tokenizer->tokenize(input);
    for (const auto& t : tokens) require_utf8(t);
    require_utf8(tokenizer->detokenize(tokens));
  }
  for (const char* name : {"13a", "zh", "intl", "char", "none"})
    require_utf8(eval::tokenize_for_bleu(input, name));
  require_utf8(text::unicode_lower(input));
  for (const auto& word : text::python_split(input)) require_utf8(word);
  return 0;
}
