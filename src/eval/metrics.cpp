#include "attnkit/eval/metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>

#include <unicode/uchar.h>

#include "attnkit/core/error.h"
#include "attnkit/data/text.h"
#include "streams.h"

namespace attnkit::eval {
namespace {

void replace_all(std::u32string& s, const std::u32string& from, const std::u32string& to) {
  for (size_t pos = 0; (pos = s.find(from, pos)) != std::u32string::npos; pos += to.size())
    s.replace(pos, from.size(), to);
}

bool is_digit(char32_t c) { return c >= U'0' && c <= U'9'; }

// The two replacements sacreBLEU's pair rules make: r"\1 \2 " and r" \1 \2".
enum class Spaced { AfterEach, BeforeEach };

// Applies a two-character pattern left to right without overlaps, as Python's re.sub does,
// replacing each match by its two characters spaced as `spaced` says.
template <typename Match>
std::u32string sub_pairs(const std::u32string& s, Match match, Spaced spaced) {
  std::u32string out;
  size_t i = 0;
  while (i < s.size()) {
    if (i + 1 < s.size() && match(s[i], s[i + 1])) {
      for (char32_t c : {s[i], s[i + 1]}) {
        if (spaced == Spaced::BeforeEach) out += U' ';
        out += c;
        if (spaced == Spaced::AfterEach) out += U' ';
      }
      i += 2;
    } else {
      out.push_back(s[i++]);
    }
  }
  return out;
}

// Puts a space on each side of every character `pad` holds for (re.sub(r"(X)", r" \1 ")).
template <typename Pad>
std::u32string pad_each(const std::u32string& s, Pad pad) {
  std::u32string out;
  for (char32_t c : s) {
    if (pad(c)) out += U' ';
    out += c;
    if (pad(c)) out += U' ';
  }
  return out;
}

// sacreBLEU's regexp post-tokenizer shared by 13a and zh.
std::string post_tokenize(std::u32string s) {
  // Rule 1: pad the ASCII symbols { | } ~ [ \ ] ^ _ ` space ! " # $ % & ( ) * + : ; < = > ? @ /
  std::u32string padded = pad_each(s, [](char32_t c) {
    return (c >= 0x7B && c <= 0x7E) || (c >= 0x5B && c <= 0x60) || (c >= 0x20 && c <= 0x26) ||
           (c >= 0x28 && c <= 0x2B) || (c >= 0x3A && c <= 0x40) || c == U'/';
  });
  auto period_or_comma = [](char32_t c) { return c == U'.' || c == U','; };
  // Rule 2: period and comma unless preceded by a digit.
  padded = sub_pairs(
      padded, [&](char32_t a, char32_t b) { return !is_digit(a) && period_or_comma(b); },
      Spaced::AfterEach);
  // Rule 3: period and comma unless followed by a digit.
  padded = sub_pairs(
      padded, [&](char32_t a, char32_t b) { return period_or_comma(a) && !is_digit(b); },
      Spaced::BeforeEach);
  // Rule 4: a dash after a digit.
  padded = sub_pairs(
      padded, [](char32_t a, char32_t b) { return is_digit(a) && b == U'-'; }, Spaced::AfterEach);
  // Python's str.split(): any Unicode whitespace separates.
  std::string out;
  std::u32string word;
  auto flush = [&] {
    if (word.empty()) return;
    if (!out.empty()) out += ' ';
    out += text::encode(word);
    word.clear();
  };
  for (char32_t c : padded) {
    if (text::is_python_space(c))
      flush();
    else
      word += c;
  }
  flush();
  return out;
}

// sacreBLEU's zh ranges as Python evaluates them: its '\u20000' and '\u2f800' bounds are
// two-character strings, so those ranges are really U+2001..U+2A6D and U+2F81..U+2FA1.
bool sacrebleu_chinese(char32_t c) {
  static const std::pair<char32_t, char32_t> ranges[] = {
      {0x3400, 0x4db5}, {0x4e00, 0x9fa5}, {0x9fa6, 0x9fbb}, {0xf900, 0xfa2d}, {0xfa30, 0xfa6a},
      {0xfa70, 0xfad9}, {0x2001, 0x2a6d}, {0x2f81, 0x2fa1}, {0xff00, 0xffef}, {0x2e80, 0x2eff},
      {0x3000, 0x303f}, {0x31c0, 0x31ef}, {0x2f00, 0x2fdf}, {0x2ff0, 0x2fff}, {0x3100, 0x312f},
      {0x31a0, 0x31bf}, {0xfe10, 0xfe1f}, {0xfe30, 0xfe4f}, {0x2600, 0x26ff}, {0x2700, 0x27bf},
      {0x3200, 0x32ff}, {0x3300, 0x33ff}};
  for (const auto& [lo, hi] : ranges)
    if (c >= lo && c <= hi) return true;
  return false;
}

std::u32string python_strip(std::u32string s) {
  while (!s.empty() && text::is_python_space(s.back())) s.pop_back();
  size_t i = 0;
  while (i < s.size() && text::is_python_space(s[i])) ++i;
  return s.substr(i);
}

// Unicode general categories, as the regex module's \p{P}, \p{S} and \p{N} test them.
bool is_punctuation(char32_t c) { return U_GET_GC_MASK(static_cast<UChar32>(c)) & U_GC_P_MASK; }
bool is_symbol(char32_t c) { return U_GET_GC_MASK(static_cast<UChar32>(c)) & U_GC_S_MASK; }
bool is_number(char32_t c) { return U_GET_GC_MASK(static_cast<UChar32>(c)) & U_GC_N_MASK; }

// Python's " ".join(line.split()) of a UTF-32 string.
std::string join_words(const std::u32string& s) {
  std::string out;
  for (const auto& w : text::python_split(text::encode(s))) out += (out.empty() ? "" : " ") + w;
  return out;
}

std::map<std::vector<std::string>, long> ngrams(const std::vector<std::string>& words, int max_n) {
  std::map<std::vector<std::string>, long> counts;
  for (int n = 1; n <= max_n; ++n)
    for (size_t i = 0; i + n <= words.size(); ++i)
      ++counts[std::vector<std::string>(words.begin() + i, words.begin() + i + n)];
  return counts;
}

}  // namespace

std::string tokenize_13a(const std::string& line) {
  auto s = text::decode(line);
  replace_all(s, U"<skipped>", U"");
  replace_all(s, U"-\n", U"");
  replace_all(s, U"\n", U" ");
  replace_all(s, U"&quot;", U"\"");
  replace_all(s, U"&amp;", U"&");
  replace_all(s, U"&lt;", U"<");
  replace_all(s, U"&gt;", U">");
  return post_tokenize(U" " + s + U" ");
}

std::string tokenize_zh(const std::string& line) {
  return post_tokenize(pad_each(python_strip(text::decode(line)), sacrebleu_chinese));
}

std::string tokenize_intl(const std::string& line) {
  // (\P{N})(\p{P}) -> "\1 \2 ", then (\p{P})(\P{N}) -> " \1 \2", then (\p{S}) -> " \1 ".
  auto s = sub_pairs(
      text::decode(line), [](char32_t a, char32_t b) { return !is_number(a) && is_punctuation(b); },
      Spaced::AfterEach);
  s = sub_pairs(
      s, [](char32_t a, char32_t b) { return is_punctuation(a) && !is_number(b); },
      Spaced::BeforeEach);
  return join_words(pad_each(s, is_symbol));
}

std::string tokenize_char(const std::string& line) {
  std::u32string spaced;
  for (char32_t c : text::decode(line)) {
    spaced += c;
    spaced += U' ';
  }
  return join_words(spaced);
}

std::string tokenize_for_bleu(const std::string& line, const std::string& tokenizer) {
  if (tokenizer == "13a") return tokenize_13a(line);
  if (tokenizer == "zh") return tokenize_zh(line);
  if (tokenizer == "intl") return tokenize_intl(line);
  if (tokenizer == "char") return tokenize_char(line);
  if (tokenizer == "none") return line;
  throw Error("unknown BLEU tokenizer '" + tokenizer + "' (valid: 13a, zh, intl, char, none)");
}

std::string BleuScore::format() const {
  char buf[256];
  std::snprintf(
      buf, sizeof buf,
      "BLEU = %.2f %.1f/%.1f/%.1f/%.1f (BP = %.3f ratio = %.3f hyp_len = %ld ref_len = %ld)", score,
      precisions[0], precisions[1], precisions[2], precisions[3], bp,
      ref_len ? static_cast<double>(sys_len) / ref_len : 0.0, sys_len, ref_len);
  return buf;
}

BleuScore corpus_bleu(const std::vector<std::string>& hyps,
                      const std::vector<std::vector<std::string>>& refs, const BleuOptions& o) {
  check_streams("BLEU", hyps, refs);
  BleuScore b;
  // As sacreBLEU: lowercase, strip trailing whitespace, tokenize, split on whitespace.
  auto prepare = [&](const std::string& s) {
    const std::string line(text::strip_eol(s));
    return text::python_split(tokenize_for_bleu(
        text::python_rstrip(o.lowercase ? text::unicode_lower(line) : line), o.tokenize));
  };
  for (size_t i = 0; i < hyps.size(); ++i) {
    const auto hyp = prepare(hyps[i]);
    std::map<std::vector<std::string>, long> ref_max;
    long closest_diff = -1, closest_len = 0;
    for (const auto& stream : refs) {  // an empty reference line is a reference of no words
      const auto ref = prepare(stream[i]);
      const long len = static_cast<long>(ref.size());
      const long diff = std::labs(static_cast<long>(hyp.size()) - len);
      if (closest_diff < 0 || diff < closest_diff || (diff == closest_diff && len < closest_len)) {
        closest_diff = diff;
        closest_len = len;
      }
      for (const auto& [g, c] : ngrams(ref, 4)) ref_max[g] = std::max(ref_max[g], c);
    }
    b.sys_len += static_cast<long>(hyp.size());
    b.ref_len += closest_len;
    for (const auto& [g, c] : ngrams(hyp, 4)) {
      const size_t n = g.size() - 1;
      auto it = ref_max.find(g);
      b.counts[n] += std::min(c, it == ref_max.end() ? 0L : it->second);
      b.totals[n] += c;
    }
  }
  b.bp = b.sys_len < b.ref_len
             ? (b.sys_len > 0 ? std::exp(1.0 - static_cast<double>(b.ref_len) / b.sys_len) : 0.0)
             : 1.0;
  // No matching n-gram of any order: 0, whatever the smoothing (sacreBLEU #141).
  if (std::all_of(b.counts.begin(), b.counts.end(), [](long c) { return c == 0; })) return b;
  double smooth_mteval = 1, log_sum = 0;
  int order = 4;
  for (int n = 0; n < 4; ++n) {
    if (b.totals[n] == 0) break;
    if (o.effective_order) order = n + 1;
    if (b.counts[n] == 0) {
      if (o.smooth == "exp") {
        smooth_mteval *= 2;
        b.precisions[n] = 100.0 / (smooth_mteval * b.totals[n]);
      } else if (o.smooth == "floor") {
        b.precisions[n] = 100.0 * o.smooth_value / b.totals[n];
      }
    } else {
      b.precisions[n] = 100.0 * b.counts[n] / b.totals[n];
    }
  }
  for (int n = 0; n < order; ++n)
    log_sum += b.precisions[n] > 0 ? std::log(b.precisions[n]) : -9999999999.0;
  b.score = b.bp * std::exp(log_sum / order);
  return b;
}

BleuScore sentence_bleu(const std::string& hyp, const std::vector<std::string>& refs,
                        BleuOptions options) {
  options.effective_order = true;
  std::vector<std::vector<std::string>> streams;
  for (const auto& r : refs) streams.push_back({r});
  return corpus_bleu({hyp}, streams, options);
}

namespace {

using Counts = std::map<std::u32string, long>;

// One segment's n-gram counts per order: characters 1..char_order, then words 1..word_order.
std::vector<Counts> chrf_ngrams(const std::string& line, const ChrfOptions& o) {
  const std::string s = o.lowercase ? text::unicode_lower(line) : line;
  std::vector<Counts> out;
  std::u32string chars;
  for (char32_t c : text::decode(s))
    if (o.whitespace || !text::is_python_space(c)) chars.push_back(c);
  for (int n = 1; n <= o.char_order; ++n) {
    Counts counts;
    for (size_t k = 0; k + n <= chars.size(); ++k) ++counts[chars.substr(k, n)];
    out.push_back(std::move(counts));
  }
  if (o.word_order == 0) return out;
  // chrF++'s words: split on whitespace, one punctuation mark split off the end (else the start).
  static const std::u32string kPunct = U"!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~";
  std::vector<std::u32string> words;
  for (const auto& w8 : text::python_split(s)) {
    const auto w = text::decode(w8);
    if (w.size() > 1 && kPunct.find(w.back()) != std::u32string::npos) {
      words.push_back(w.substr(0, w.size() - 1));
      words.push_back(w.substr(w.size() - 1));
    } else if (w.size() > 1 && kPunct.find(w.front()) != std::u32string::npos) {
      words.push_back(w.substr(0, 1));
      words.push_back(w.substr(1));
    } else {
      words.push_back(w);
    }
  }
  for (int n = 1; n <= o.word_order; ++n) {
    Counts counts;
    for (size_t k = 0; k + n <= words.size(); ++k) {
      std::u32string gram = words[k];
      for (int j = 1; j < n; ++j) gram += U' ' + words[k + j];
      ++counts[gram];
    }
    out.push_back(std::move(counts));
  }
  return out;
}

// [hyp, ref, match] per order. A hypothesis n-gram counts only where the reference has n-grams
// of that order (sacreBLEU's rule: no credit is possible there, so no penalty either).
std::vector<double> chrf_statistics(const std::vector<Counts>& hyp,
                                    const std::vector<Counts>& ref) {
  std::vector<double> stats;
  for (size_t n = 0; n < hyp.size(); ++n) {
    long hyp_count = 0, ref_count = 0, match = 0;
    for (const auto& [g, c] : ref[n]) ref_count += c;
    for (const auto& [g, c] : hyp[n]) {
      hyp_count += c;
      auto it = ref[n].find(g);
      if (it != ref[n].end()) match += std::min(c, it->second);
    }
    stats.insert(stats.end(), {static_cast<double>(ref[n].empty() ? 0 : hyp_count),
                               static_cast<double>(ref_count), static_cast<double>(match)});
  }
  return stats;
}

double chrf_score(const std::vector<double>& stats, const ChrfOptions& o) {
  const int orders = o.char_order + o.word_order;
  const double eps = 1e-16, factor = o.beta * o.beta;
  double score = 0, avg_prec = 0, avg_rec = 0;
  int effective = 0;
  for (int n = 0; n < orders; ++n) {
    const double hyp = stats[3 * n], ref = stats[3 * n + 1], match = stats[3 * n + 2];
    const double prec = hyp > 0 ? match / hyp : eps, rec = ref > 0 ? match / ref : eps;
    const double denom = factor * prec + rec;
    score += denom > 0 ? (1 + factor) * prec * rec / denom : eps;
    if (hyp > 0 && ref > 0) {
      avg_prec += prec;
      avg_rec += rec;
      ++effective;
    }
  }
  if (o.eps_smoothing) return 100 * score / orders;
  if (effective == 0) return 0;
  avg_prec /= effective;
  avg_rec /= effective;
  if (avg_prec + avg_rec == 0) return 0;
  return 100 * (1 + factor) * avg_prec * avg_rec / (factor * avg_prec + avg_rec);
}

// The segment's statistics against its best reference (the highest segment chrF; the first on
// ties).
std::vector<double> best_statistics(const std::string& hyp, const std::vector<std::string>& refs,
                                    const ChrfOptions& o) {
  const auto h = chrf_ngrams(hyp, o);
  std::vector<double> best;
  double best_score = -1;
  for (const auto& r : refs) {
    auto stats = chrf_statistics(h, chrf_ngrams(r, o));
    const double score = chrf_score(stats, o);
    if (score > best_score) {
      best_score = score;
      best = std::move(stats);
    }
  }
  return best;
}

}  // namespace

double corpus_chrf(const std::vector<std::string>& hyps,
                   const std::vector<std::vector<std::string>>& refs, const ChrfOptions& o) {
  check_streams("chrF", hyps, refs);
  std::vector<double> total(3 * (o.char_order + o.word_order), 0.0);
  for (size_t i = 0; i < hyps.size(); ++i) {
    std::vector<std::string> segment_refs;
    for (const auto& stream : refs) segment_refs.push_back(stream[i]);
    const auto stats = best_statistics(hyps[i], segment_refs, o);
    for (size_t k = 0; k < total.size(); ++k) total[k] += stats[k];
  }
  return chrf_score(total, o);
}

double corpus_chrf(const std::vector<std::string>& hyps, const std::vector<std::string>& refs,
                   const ChrfOptions& options) {
  return corpus_chrf(hyps, std::vector<std::vector<std::string>>{refs}, options);
}

double sentence_chrf(const std::string& hyp, const std::vector<std::string>& refs,
                     const ChrfOptions& options) {
  if (refs.empty()) throw Error("chrF: no reference");
  return chrf_score(best_statistics(hyp, refs, options), options);
}

double alignment_error_rate(const Alignment& a, const Alignment& sure, const Alignment& possible) {
  size_t as = 0, ap = 0;
  for (const auto& link : a) {
    if (sure.count(link)) ++as;
    if (possible.count(link) || sure.count(link)) ++ap;
  }
  const double denom = static_cast<double>(a.size() + sure.size());
  return denom == 0 ? 0.0 : 1.0 - (as + ap) / denom;
}

std::string bleu_tokenizer_for(const std::string& lang, const std::string& target_tokenizer) {
  const std::string base = lang.substr(0, lang.find_first_of("_-@."));
  if (base == "zh") return "zh";
  if (base == "ja" || base == "ko" || base == "th") return "char";
  if (base.empty() && target_tokenizer == "zh") return "zh";
  return "13a";
}

}  // namespace attnkit::eval
