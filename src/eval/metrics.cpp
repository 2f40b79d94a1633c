#include "attnkit/eval/metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>

#include "attnkit/core/error.h"
#include "attnkit/data/text.h"

namespace attnkit::eval {
namespace {

void replace_all(std::u32string& s, const std::u32string& from, const std::u32string& to) {
  for (size_t pos = 0; (pos = s.find(from, pos)) != std::u32string::npos; pos += to.size())
    s.replace(pos, from.size(), to);
}

bool is_digit(char32_t c) { return c >= U'0' && c <= U'9'; }

// Applies a two-character pattern left to right without overlaps, as Python's re.sub does.
template <typename Match, typename Emit>
std::u32string sub_pairs(const std::u32string& s, Match match, Emit emit) {
  std::u32string out;
  size_t i = 0;
  while (i < s.size()) {
    if (i + 1 < s.size() && match(s[i], s[i + 1])) {
      emit(out, s[i], s[i + 1]);
      i += 2;
    } else {
      out.push_back(s[i++]);
    }
  }
  return out;
}

// sacreBLEU's regexp post-tokenizer shared by 13a and zh.
std::string post_tokenize(std::u32string s) {
  // Rule 1: pad the ASCII symbols { | } ~ [ \ ] ^ _ ` space ! " # $ % & ( ) * + : ; < = > ? @ /
  std::u32string padded;
  for (char32_t c : s) {
    const bool symbol = (c >= 0x7B && c <= 0x7E) || (c >= 0x5B && c <= 0x60) ||
                        (c >= 0x20 && c <= 0x26) || (c >= 0x28 && c <= 0x2B) ||
                        (c >= 0x3A && c <= 0x40) || c == U'/';
    if (symbol) {
      padded += U' ';
      padded += c;
      padded += U' ';
    } else {
      padded += c;
    }
  }
  auto period_or_comma = [](char32_t c) { return c == U'.' || c == U','; };
  // Rule 2: period and comma unless preceded by a digit.
  padded = sub_pairs(
      padded, [&](char32_t a, char32_t b) { return !is_digit(a) && period_or_comma(b); },
      [](std::u32string& o, char32_t a, char32_t b) {
        o += a;
        o += U' ';
        o += b;
        o += U' ';
      });
  // Rule 3: period and comma unless followed by a digit.
  padded = sub_pairs(
      padded, [&](char32_t a, char32_t b) { return period_or_comma(a) && !is_digit(b); },
      [](std::u32string& o, char32_t a, char32_t b) {
        o += U' ';
        o += a;
        o += U' ';
        o += b;
      });
  // Rule 4: a dash after a digit.
  padded = sub_pairs(
      padded, [](char32_t a, char32_t b) { return is_digit(a) && b == U'-'; },
      [](std::u32string& o, char32_t a, char32_t b) {
        o += a;
        o += U' ';
        o += b;
        o += U' ';
      });
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
    const bool space = c == U' ' || (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x1F) ||
                       c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) ||
                       c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
    if (space)
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
  auto space = [](char32_t c) {
    return c == U' ' || (c >= 0x09 && c <= 0x0D) || c == 0x3000 || c == 0xA0;
  };
  while (!s.empty() && space(s.back())) s.pop_back();
  size_t i = 0;
  while (i < s.size() && space(s[i])) ++i;
  return s.substr(i);
}

std::vector<std::string> split_words(const std::string& s) {
  std::vector<std::string> words;
  std::istringstream in(s);
  for (std::string w; in >> w;) words.push_back(w);
  return words;
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
  std::u32string spaced;
  for (char32_t c : python_strip(text::decode(line))) {
    if (sacrebleu_chinese(c)) {
      spaced += U' ';
      spaced += c;
      spaced += U' ';
    } else {
      spaced += c;
    }
  }
  return post_tokenize(spaced);
}

std::string tokenize_for_bleu(const std::string& line, const std::string& tokenizer) {
  if (tokenizer == "13a") return tokenize_13a(line);
  if (tokenizer == "zh") return tokenize_zh(line);
  if (tokenizer == "none") return line;
  throw Error("unknown BLEU tokenizer '" + tokenizer + "' (valid: 13a, zh, none)");
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
  for (const auto& stream : refs)
    if (stream.size() != hyps.size())
      throw Error("BLEU: " + std::to_string(hyps.size()) +
                  " hypotheses but a reference stream has " + std::to_string(stream.size()) +
                  " lines");
  BleuScore b;
  auto prepare = [&](const std::string& s) {
    std::string t(text::strip_eol(s));
    while (!t.empty() && (t.back() == ' ' || t.back() == '\t')) t.pop_back();  // rstrip
    return split_words(tokenize_for_bleu(o.lowercase ? text::ascii_lower(t) : t, o.tokenize));
  };
  for (size_t i = 0; i < hyps.size(); ++i) {
    const auto hyp = prepare(hyps[i]);
    std::map<std::vector<std::string>, long> ref_max;
    long closest_diff = -1, closest_len = 0;
    for (const auto& stream : refs) {
      if (stream[i].empty()) continue;
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
  b.bp = b.sys_len < b.ref_len
             ? (b.sys_len > 0 ? std::exp(1.0 - static_cast<double>(b.ref_len) / b.sys_len) : 0.0)
             : 1.0;
  b.score = b.bp * std::exp(log_sum / order);
  return b;
}

double corpus_chrf(const std::vector<std::string>& hyps, const std::vector<std::string>& refs,
                   const ChrfOptions& o) {
  if (hyps.size() != refs.size())
    throw Error("chrF: " + std::to_string(hyps.size()) + " hypotheses but " +
                std::to_string(refs.size()) + " references");
  std::vector<double> stats(3 * o.char_order, 0.0);  // per order: hyp, ref, match
  auto prepare = [&](const std::string& s) {
    std::u32string chars;
    for (char32_t c : text::decode(s)) {
      const bool space = c == U' ' || (c >= 0x09 && c <= 0x0D) || c == 0x3000 || c == 0xA0;
      if (o.whitespace || !space) chars.push_back(c);
    }
    return chars;
  };
  for (size_t i = 0; i < hyps.size(); ++i) {
    const auto h = prepare(hyps[i]), r = prepare(refs[i]);
    for (int n = 1; n <= o.char_order; ++n) {
      std::map<std::u32string, long> hc, rc;
      for (size_t k = 0; k + n <= h.size(); ++k) ++hc[h.substr(k, n)];
      for (size_t k = 0; k + n <= r.size(); ++k) ++rc[r.substr(k, n)];
      long match = 0;
      for (const auto& [g, c] : hc) {
        auto it = rc.find(g);
        if (it != rc.end()) match += std::min(c, it->second);
      }
      stats[3 * (n - 1)] += h.size() >= static_cast<size_t>(n) ? h.size() - n + 1 : 0;
      stats[3 * (n - 1) + 1] += r.size() >= static_cast<size_t>(n) ? r.size() - n + 1 : 0;
      stats[3 * (n - 1) + 2] += match;
    }
  }
  const double eps = 1e-16, factor = o.beta * o.beta;
  double score = 0, avg_prec = 0, avg_rec = 0;
  int effective = 0;
  for (int n = 0; n < o.char_order; ++n) {
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
  if (o.eps_smoothing) return 100 * score / o.char_order;
  if (effective == 0) return 0;
  avg_prec /= effective;
  avg_rec /= effective;
  if (avg_prec + avg_rec == 0) return 0;
  return 100 * (1 + factor) * avg_prec * avg_rec / (factor * avg_prec + avg_rec);
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

}  // namespace attnkit::eval
