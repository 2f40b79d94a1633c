#pragma once

#include "attnkit/data/alignment.h"

#include <array>
#include <cstdint>
#include <set>
#include <string>
#include <utility>
#include <vector>

// Corpus metrics identical to sacreBLEU's defaults (BLEU: 13a tokenizer, exp smoothing, 4-grams;
// chrF: character 6-grams, beta 2, whitespace removed), and alignment error rate.
namespace attnkit::eval {

// sacreBLEU's tokenizers: "13a" (mteval-v13a), "zh" (CJK characters split, then 13a), "intl"
// (mteval-v14's international: punctuation and symbols by Unicode category), "char" (every
// character), "none".
std::string tokenize_13a(const std::string& line);
std::string tokenize_zh(const std::string& line);
std::string tokenize_intl(const std::string& line);
std::string tokenize_char(const std::string& line);
std::string tokenize_for_bleu(const std::string& line, const std::string& tokenizer);

// The BLEU tokenizer for a target language, as sacreBLEU is used for it: "zh" for Chinese,
// "char" for Japanese, Korean and Thai (sacreBLEU's ja-mecab and ko-mecab need MeCab), "13a"
// for the rest. `lang` is a gettext code (zh_CN, ja, de) or empty; then the target tokenizer
// decides ("zh" gives "zh").
std::string bleu_tokenizer_for(const std::string& lang, const std::string& target_tokenizer);

struct BleuOptions {
  std::string tokenize = "13a";
  std::string smooth = "exp";  // exp | floor | none
  double smooth_value = 0.1;   // for floor
  bool lowercase = false;
  // Average only over the n-gram orders the hypotheses have (sacreBLEU's use_effective_order).
  bool effective_order = false;
};

struct BleuScore {
  double score = 0;  // 0..100
  std::array<long, 4> counts{}, totals{};
  std::array<double, 4> precisions{};
  double bp = 0;
  long sys_len = 0, ref_len = 0;
  std::string format() const;  // "BLEU = 48.53 82.4/50.0/45.5/37.5 (BP = 0.943 ...)"
};

// One reference stream per element of `refs` (each as long as `hyps`). The figures equal
// sacreBLEU 2.6.0's (tests/test_sacrebleu.cpp, on its own scores in tests/golden/sacrebleu/).
BleuScore corpus_bleu(const std::vector<std::string>& hyps,
                      const std::vector<std::vector<std::string>>& refs,
                      const BleuOptions& options = {});
// sacreBLEU's --sentence-level BLEU: one hypothesis, its references, effective order on.
BleuScore sentence_bleu(const std::string& hyp, const std::vector<std::string>& refs,
                        BleuOptions options = {});

struct ChrfOptions {
  int char_order = 6;
  int word_order = 0;  // 2: chrF++
  double beta = 2;
  bool eps_smoothing = false;
  bool whitespace = false;  // keep whitespace in character n-grams
  bool lowercase = false;
};

// Corpus chrF (chrF++ with word_order 2), 0..100: each segment's statistics against its best
// reference, summed over the corpus.
double corpus_chrf(const std::vector<std::string>& hyps,
                   const std::vector<std::vector<std::string>>& refs,
                   const ChrfOptions& options = {});
double corpus_chrf(const std::vector<std::string>& hyps, const std::vector<std::string>& refs,
                   const ChrfOptions& options = {});
double sentence_chrf(const std::string& hyp, const std::vector<std::string>& refs,
                     const ChrfOptions& options = {});

// Translation edit rate as sacreBLEU computes it (default options: lowercased, split on
// whitespace, Tercom's shifts): 100 x the fewest edits over the mean reference length, each
// segment against its closest reference.
struct TerScore {
  double score =
      0;  // 0.. (above 100 when the hypotheses need more edits than references have words)
  double edits = 0, ref_length = 0;
};
TerScore corpus_ter(const std::vector<std::string>& hyps,
                    const std::vector<std::vector<std::string>>& refs);
// One segment's (edits, reference length) on words.
std::pair<int64_t, int64_t> translation_edits(const std::vector<std::string>& hyp,
                                              const std::vector<std::string>& ref);

using data::Alignment;
// Och & Ney's AER = 1 - (|A∩S| + |A∩P|) / (|A| + |S|), with sure links S ⊆ possible links P.
double alignment_error_rate(const Alignment& predicted, const Alignment& sure,
                            const Alignment& possible);

}  // namespace attnkit::eval
