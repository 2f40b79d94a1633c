// Translation edit rate as sacreBLEU 2.x computes it (its re-implementation of Tercom): the
// fewest word edits (insertions, deletions, substitutions, and shifts of a run of words) that
// turn a hypothesis into a reference, over the reference's length. Shifts are searched greedily:
// the shift that lowers the edit distance the most (then the longest, the earliest, the one to
// the earliest place) is made, until none helps or 1000 candidates have been tried; the edit
// distance is computed in a beam around the diagonal. Each rule follows sacreBLEU's, so that
// the figures are its figures (tests/test_sacrebleu.cpp).

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "attnkit/core/error.h"
#include "attnkit/data/text.h"
#include "attnkit/eval/metrics.h"
#include "streams.h"

namespace attnkit::eval {
namespace {

using Words = std::vector<std::string>;

constexpr int kMaxShiftSize = 10, kMaxShiftDistance = 50, kBeamWidth = 25;
constexpr int kMaxShiftCandidates = 1000;
constexpr int64_t kInfinity = 10000000000000000;

// Edit operations turning the hypothesis into the reference, as the trace records them:
// hypothesis word kept or substituted, hypothesis word deleted, reference word inserted.
enum class Op : char { Keep, Substitute, Delete, Insert, Undefined };

struct Cell {
  int64_t cost = kInfinity;
  Op op = Op::Undefined;
};

// The beam edit distance between `hyp` and `ref`, and its trace (first operation first).
std::pair<int64_t, std::vector<Op>> edit_distance(const Words& hyp, const Words& ref) {
  const int64_t nh = static_cast<int64_t>(hyp.size()), nr = static_cast<int64_t>(ref.size());
  std::vector<std::vector<Cell>> dist(nh + 1, std::vector<Cell>(nr + 1));
  for (int64_t j = 0; j <= nr; ++j) dist[0][j] = {j, Op::Insert};
  const double ratio = nh > 0 ? static_cast<double>(nr) / nh : 1.0;
  // In sentences of very different lengths the beam must still overlap the previous row's.
  const int64_t beam =
      kBeamWidth < ratio / 2 ? static_cast<int64_t>(std::ceil(ratio / 2 + kBeamWidth)) : kBeamWidth;
  for (int64_t i = 1; i <= nh; ++i) {
    const auto diagonal = static_cast<int64_t>(std::floor(i * ratio));
    const int64_t lo = std::max<int64_t>(0, diagonal - beam);
    const int64_t hi = i == nh ? nr + 1 : std::min(nr + 1, diagonal + beam);
    for (int64_t j = lo; j < hi; ++j) {
      Cell& cell = dist[i][j];
      if (j == 0) {
        cell = {dist[i - 1][0].cost + 1, Op::Delete};
        continue;
      }
      const bool same = hyp[i - 1] == ref[j - 1];
      // Keep or substitute first, then delete, then insert: Tercom's preference, with deletion
      // and insertion swapped as sacreBLEU swaps them (it aligns from the flipped trace).
      const Cell options[] = {
          {dist[i - 1][j - 1].cost + (same ? 0 : 1), same ? Op::Keep : Op::Substitute},
          {dist[i - 1][j].cost + 1, Op::Delete},
          {dist[i][j - 1].cost + 1, Op::Insert}};
      for (const Cell& option : options)
        if (cell.cost > option.cost) cell = option;
    }
  }
  std::vector<Op> trace;
  for (int64_t i = nh, j = nr; i > 0 || j > 0;) {
    const Op op = dist[i][j].op;
    trace.push_back(op);
    if (op == Op::Keep || op == Op::Substitute) {
      --i;
      --j;
    } else if (op == Op::Insert) {
      --j;
    } else if (op == Op::Delete) {
      --i;
    } else {
      throw Error("TER: the edit distance's beam left a cell undefined");
    }
  }
  std::reverse(trace.begin(), trace.end());
  return {dist[nh][nr].cost, std::move(trace)};
}

// Where each reference word sits in the hypothesis (-1 before the first), and which words of
// either side are not matched, from the trace.
struct Alignment {
  std::vector<int64_t> hyp_of_ref;
  std::vector<int> ref_error, hyp_error;
};

Alignment align(const std::vector<Op>& trace) {
  Alignment a;
  int64_t h = -1;
  for (Op op : trace) {
    if (op == Op::Keep || op == Op::Substitute) {
      ++h;
      a.hyp_of_ref.push_back(h);
      a.hyp_error.push_back(op == Op::Substitute);
      a.ref_error.push_back(op == Op::Substitute);
    } else if (op == Op::Delete) {  // a hypothesis word with no reference word
      ++h;
      a.hyp_error.push_back(1);
    } else {  // a reference word with no hypothesis word
      a.hyp_of_ref.push_back(h);
      a.ref_error.push_back(1);
    }
  }
  return a;
}

// `words` with [start, start + length) moved before position `target` (of the original).
Words shifted(const Words& words, int64_t start, int64_t length, int64_t target) {
  Words out(words.begin(), words.end());
  auto first = out.begin() + start, last = first + length;
  if (target < start)
    std::rotate(out.begin() + target, first, last);
  else if (target > start + length)
    std::rotate(first, last, out.begin() + target);
  else  // within the run: as sacreBLEU, the run moves `target - start` words to the right, as
        // far as there are words (Python's slices stop at the end; an unclamped end ran past it,
        // found by tests/fuzz/fuzz_metrics)
    std::rotate(first, last, last + std::min<int64_t>(target - start, out.end() - last));
  return out;
}

struct Shift {
  int64_t gain = 0, length = 0, start = 0, target = 0;
  Words words;
  // sacreBLEU's order: the largest gain, then the longest run, the earliest start, the earliest
  // target, then the larger word list.
  bool better_than(const Shift& o) const {
    if (gain != o.gain) return gain > o.gain;
    if (length != o.length) return length > o.length;
    if (start != o.start) return start < o.start;
    if (target != o.target) return target < o.target;
    return words > o.words;
  }
};

// The best shift of `hyp`, if any; counts the candidates tried into `checked`.
std::optional<Shift> best_shift(const Words& hyp, const Words& ref, int& checked) {
  const auto [before, trace] = edit_distance(hyp, ref);
  const Alignment a = align(trace);
  const int64_t nh = static_cast<int64_t>(hyp.size()), nr = static_cast<int64_t>(ref.size());
  std::optional<Shift> best;
  for (int64_t sh = 0; sh < nh; ++sh) {
    for (int64_t sr = 0; sr < nr; ++sr) {
      if (std::abs(sr - sh) > kMaxShiftDistance) continue;
      for (int64_t len = 1; len <= kMaxShiftSize && sh + len <= nh && sr + len <= nr &&
                            hyp[sh + len - 1] == ref[sr + len - 1];
           ++len) {
        // Only a run that is wrong where it is, and missing where it would go.
        const bool hyp_wrong = std::any_of(a.hyp_error.begin() + sh, a.hyp_error.begin() + sh + len,
                                           [](int e) { return e != 0; });
        const bool ref_wrong = std::any_of(a.ref_error.begin() + sr, a.ref_error.begin() + sr + len,
                                           [](int e) { return e != 0; });
        if (!hyp_wrong || !ref_wrong) continue;
        if (sh <= a.hyp_of_ref[sr] && a.hyp_of_ref[sr] < sh + len) continue;  // into itself
        int64_t previous = -1;
        for (int64_t offset = -1; offset < len; ++offset) {
          int64_t target;
          if (sr + offset == -1)
            target = 0;
          else if (sr + offset < nr)
            target = a.hyp_of_ref[sr + offset] + 1;
          else
            break;
          if (target == previous) continue;
          previous = target;
          Shift s{0, len, sh, target, shifted(hyp, sh, len, target)};
          s.gain = before - edit_distance(s.words, ref).first;
          ++checked;
          if (!best || s.better_than(*best)) best = std::move(s);
        }
        if (checked >= kMaxShiftCandidates) return best;  // after the run that reached it
      }
    }
  }
  return best;
}

}  // namespace

std::pair<int64_t, int64_t> translation_edits(const std::vector<std::string>& hyp,
                                              const std::vector<std::string>& ref) {
  if (ref.empty()) return {static_cast<int64_t>(hyp.size()), 0};
  Words words = hyp;
  int64_t shifts = 0;
  int checked = 0;
  while (true) {
    auto shift = best_shift(words, ref, checked);
    if (checked >= kMaxShiftCandidates) break;  // the last search's shift is not made
    if (!shift || shift->gain <= 0) break;
    ++shifts;
    words = std::move(shift->words);
  }
  return {shifts + edit_distance(words, ref).first, static_cast<int64_t>(ref.size())};
}

std::vector<std::string> tokenize_ter(const std::string& line) {
  return text::python_split(text::unicode_lower(text::python_rstrip(line)));
}

TerScore corpus_ter(const std::vector<std::string>& hyps,
                    const std::vector<std::vector<std::string>>& refs) {
  check_streams("TER", hyps, refs);
  TerScore t;
  for (size_t i = 0; i < hyps.size(); ++i) {
    const auto hyp = tokenize_ter(hyps[i]);
    int64_t best = kInfinity;
    double lengths = 0;
    for (const auto& stream : refs) {
      const auto [edits, length] = translation_edits(hyp, tokenize_ter(stream[i]));
      best = std::min(best, edits);
      lengths += static_cast<double>(length);
    }
    t.edits += static_cast<double>(best);
    t.ref_length += lengths / static_cast<double>(refs.size());  // the references' mean
  }
  t.score = t.ref_length > 0 ? 100 * t.edits / t.ref_length : (t.edits > 0 ? 100 : 0);
  return t;
}

}  // namespace attnkit::eval
