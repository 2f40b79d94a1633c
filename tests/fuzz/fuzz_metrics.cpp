// BLEU, chrF, chrF++ and TER on any hypothesis and reference lines (joined by "\n" in the input,
// hypotheses and references by "\n@@@@\n"). Invariants: finite scores in range.

#include <cmath>
#include <cstdlib>

#include "attnkit/data/text.h"
#include "attnkit/eval/metrics.h"
#include "fuzz_input.h"

namespace {

std::vector<std::string> lines(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t at; (at = s.find('\n', start)) != std::string::npos; start = at + 1)
    out.push_back(s.substr(start, at - start));
  out.push_back(s.substr(start));
  return out;
}

void require(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

ATTNKIT_FUZZ_TARGET(metrics) {
  using namespace attnkit;
  const auto parts = fuzz::split(data, size, "\n@@@@\n", 2);
  if (parts.size() < 2 || !text::valid_utf8(parts[0]) || !text::valid_utf8(parts[1])) return 0;
  auto hyps = lines(parts[0]);
  auto refs = lines(parts[1]);
  refs.resize(hyps.size());
  for (const char* tokenizer : {"13a", "zh", "intl", "char"}) {
    eval::BleuOptions options;
    options.tokenize = tokenizer;
    const auto bleu = eval::corpus_bleu(hyps, {refs}, options);
    require(std::isfinite(bleu.score) && bleu.score >= 0 && bleu.score <= 100 + 1e-9);
    const auto sentence = eval::sentence_bleu(hyps[0], {refs[0]}, options);
    require(std::isfinite(sentence.score) && sentence.score >= 0 && sentence.score <= 100 + 1e-9);
  }
  for (int word_order : {0, 2}) {
    eval::ChrfOptions options;
    options.word_order = word_order;
    const double chrf = eval::corpus_chrf(hyps, refs, options);
    require(std::isfinite(chrf) && chrf >= 0 && chrf <= 100 + 1e-9);
    const double sentence = eval::sentence_chrf(hyps[0], {refs[0]}, options);
    require(std::isfinite(sentence) && sentence >= 0 && sentence <= 100 + 1e-9);
  }
  const auto ter = eval::corpus_ter(hyps, {refs});
  require(std::isfinite(ter.score) && ter.score >= 0);
  return 0;
}
