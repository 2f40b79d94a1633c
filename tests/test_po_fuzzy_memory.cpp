// Fuzzy translation memory (include/attnkit/po/fuzzy_memory.h): the similarity translators'
// tools print, and the indexed search held to a scan of every pair.
#include <gtest/gtest.h>

#include <cctype>
#include <random>
#include <set>

#include "attnkit/data/text.h"
#include "attnkit/po/fuzzy_memory.h"

using namespace attnkit;

namespace {

int sim(const std::string& a, const std::string& b) {
  return po::similarity(text::decode(a), text::decode(b));
}

std::set<std::string> words_of(const std::string& s) {
  std::set<std::string> out;
  std::string w;
  for (char c : s + " ") {
    if (std::isalnum(static_cast<unsigned char>(c))) {
      w += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    } else if (!w.empty()) {
      out.insert(w);
      w.clear();
    }
  }
  return out;
}

bool share_a_word(const std::string& a, const std::string& b) {
  const auto x = words_of(a), y = words_of(b);
  for (const auto& w : x)
    if (y.count(w)) return true;
  return false;
}

}  // namespace

TEST(PoFuzzyMemory, SimilarityIsOneMinusTheDistanceOverTheLongerLength) {
  EXPECT_EQ(sim("kitten", "sitting"), 57);  // 3 edits in 7: 100 * 4 / 7, rounded down
  EXPECT_EQ(sim("sitting", "kitten"), 57);
  EXPECT_EQ(sim("Open file", "Open files"), 90);
  EXPECT_EQ(sim("Open file", "Open file"), 100);
  EXPECT_EQ(sim("", ""), 100);
  EXPECT_EQ(sim("abc", ""), 0);
  EXPECT_EQ(sim("abc", "xyz"), 0);
  EXPECT_EQ(sim("文件", "文件夹"), 66);  // code points, not bytes
}

TEST(PoFuzzyMemory, BestIsTheScansBestAmongPairsSharingAWord) {
  // Messages of a small vocabulary, so that many pairs share words and many lengths are close;
  // the queries are messages with a word changed, dropped or misspelt.
  const std::vector<std::string> words = {"open",  "save", "the",   "file",   "new", "image",
                                          "layer", "copy", "paste", "window", "as",  "all"};
  std::mt19937 rng(7);
  auto pick = [&](size_t n) { return static_cast<size_t>(rng() % n); };
  std::vector<std::string> sources;
  po::FuzzyMemory memory;
  for (int i = 0; i < 200; ++i) {
    std::string s;
    for (size_t w = 0, n = 2 + pick(5); w < n; ++w) s += (w ? " " : "") + words[pick(words.size())];
    sources.push_back(s);
    memory.add(s, "t" + std::to_string(i), i < 100 ? "a.tsv" : "b.tsv");
  }
  size_t found = 0;
  for (int q = 0; q < 300; ++q) {
    std::string query = sources[pick(sources.size())];
    const size_t at = pick(query.size());
    if (q % 3 == 0) query.insert(at, 1, 'x');
    if (q % 3 == 1) query.erase(at, 1);
    if (q % 3 == 2) query += " " + words[pick(words.size())];
    for (int threshold : {50, 75, 90}) {
      int best = -1;
      size_t best_id = 0;
      for (size_t i = 0; i < sources.size(); ++i) {
        if (!share_a_word(query, sources[i])) continue;
        const int s = sim(query, sources[i]);
        if (s >= threshold && s > best) best = s, best_id = i;
      }
      const auto hit = memory.best(query, threshold);
      ASSERT_EQ(hit.has_value(), best >= 0) << query << " at " << threshold;
      if (!hit) continue;
      ++found;
      EXPECT_EQ(hit->score, best) << query;
      EXPECT_EQ(hit->target, "t" + std::to_string(best_id)) << query;  // ties: the earlier pair
      EXPECT_EQ(hit->source, sources[best_id]);
      EXPECT_EQ(hit->origin, best_id < 100 ? "a.tsv" : "b.tsv");
    }
  }
  EXPECT_GT(found, 600u);  // most queries have a match: the test compares real hits
}
