#include "attnkit/data/archive_corpus.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <unordered_map>
#include <unordered_set>

#include "attnkit/core/error.h"
#include "attnkit/core/files.h"
#include "attnkit/data/debian.h"
#include "attnkit/data/pair_filters.h"

namespace attnkit::data {
namespace {

// Every pair that passed the filters, with the package it came from.
struct Gathered {
  std::vector<Pair> pairs;         // extra: the package
  std::vector<size_t> catalog_of;  // index into the catalogs
};

Gathered gather(const std::vector<PackageCatalog>& catalogs, const ArchiveCorpusOptions& o,
                ArchiveReport& report) {
  const ScriptCheck script(o.lang);
  Gathered g;
  report.catalog_pairs.assign(catalogs.size(), 0);
  report.catalog_errors.assign(catalogs.size(), "");
  for (size_t c = 0; c < catalogs.size(); ++c) {
    std::vector<CatalogEntry> entries;
    try {
      entries = read_mo(catalogs[c].file);
    } catch (const Error& e) {
      ++report.gettext.unreadable;
      report.catalog_errors[c] = e.what();
      continue;
    }
    ++report.gettext.catalogs;
    for (auto& p : pairs_from_catalog(entries, report.gettext)) {
      if (!script.accepts(p.target)) {
        ++report.not_in_script;
        continue;
      }
      p.extra = catalogs[c].package;
      g.pairs.push_back(std::move(p));
      g.catalog_of.push_back(c);
    }
  }
  // Length-ratio outliers against the median of the whole language.
  const double median = median_length_ratio(g.pairs);
  size_t kept = 0;
  for (size_t i = 0; i < g.pairs.size(); ++i) {
    if (length_ratio_outlier(g.pairs[i], median, o.max_length_ratio)) {
      ++report.length_ratio;
      continue;
    }
    if (kept != i) {  // a string moved onto itself is left empty
      g.pairs[kept] = std::move(g.pairs[i]);
      g.catalog_of[kept] = g.catalog_of[i];
    }
    ++kept;
  }
  g.pairs.resize(kept);
  g.catalog_of.resize(kept);
  for (size_t i = 0; i < kept; ++i) {
    ++report.catalog_pairs[g.catalog_of[i]];
    if (o.transform) o.transform(g.pairs[i]);
  }
  return g;
}

// The packages, by name, and which pairs each holds.
struct Packages {
  std::vector<std::string> names;
  std::vector<std::vector<size_t>> pairs;
  std::unordered_map<std::string, std::vector<uint32_t>> holding;  // source -> packages
};

Packages index_packages(const std::vector<Pair>& pairs) {
  Packages p;
  std::map<std::string, std::vector<size_t>> by_name;
  for (size_t i = 0; i < pairs.size(); ++i) by_name[pairs[i].extra].push_back(i);
  for (auto& [name, members] : by_name) {
    p.names.push_back(name);
    p.pairs.push_back(std::move(members));
  }
  for (uint32_t k = 0; k < p.names.size(); ++k)
    for (size_t i : p.pairs[k]) {
      auto& holders = p.holding[pairs[i].source];
      if (holders.empty() || holders.back() != k) holders.push_back(k);
    }
  return p;
}

// The English messages of package k that no package outside `held` (k aside) has.
size_t unseen_in(const Packages& p, const std::vector<Pair>& pairs, uint32_t k,
                 const std::vector<bool>& held) {
  std::unordered_set<std::string_view> sources;
  for (size_t i : p.pairs[k]) {
    const auto& holders = p.holding.at(pairs[i].source);
    if (std::all_of(holders.begin(), holders.end(), [&](uint32_t h) { return h == k || held[h]; }))
      sources.insert(pairs[i].source);
  }
  return sources.size();
}

// Validation packages in the seed's order until their unseen messages reach `wanted`. A first
// pass leaves out packages that alone would give more than half: several packages make a
// better validation set than one large one.
std::vector<uint32_t> draw_valid(const Packages& p, const std::vector<Pair>& pairs,
                                 std::vector<bool>& held, size_t wanted, uint64_t seed) {
  std::vector<size_t> order(p.names.size());
  std::iota(order.begin(), order.end(), 0);
  deterministic_shuffle(order, seed);
  std::vector<uint32_t> chosen;
  size_t total = 0;
  for (int pass = 0; pass < 2 && total < wanted; ++pass)
    for (size_t k : order) {
      if (held[k] || total >= wanted) continue;
      const size_t n = unseen_in(p, pairs, static_cast<uint32_t>(k), held);
      if (n == 0 || (pass == 0 && n > wanted / 2)) continue;
      held[k] = true;
      chosen.push_back(static_cast<uint32_t>(k));
      total += n;
    }
  std::sort(chosen.begin(), chosen.end());
  return chosen;
}

// The pairs of `packages` once each, counted; those whose English is in `exclude` are dropped.
std::vector<CountedPair> counted(const std::vector<Pair>& pairs, const Packages& p,
                                 const std::vector<uint32_t>& packages,
                                 const std::unordered_set<std::string>* exclude,
                                 ArchiveReport& report) {
  std::vector<CountedPair> out;
  std::unordered_map<std::string, size_t> at;  // source \t target -> index in out
  for (uint32_t k : packages)
    for (size_t i : p.pairs[k]) {
      const Pair& pair = pairs[i];
      if (exclude && exclude->count(pair.source)) {
        ++report.seen_in_train;
        continue;
      }
      auto [it, fresh] = at.emplace(pair.source + '\t' + pair.target, out.size());
      if (fresh) {
        out.push_back({{pair.source, pair.target, ""}, 1, pair.extra});
      } else {
        ++out[it->second].count;
        ++report.duplicates;
      }
    }
  return out;
}

}  // namespace

ArchiveCorpus build_archive_corpus(const std::vector<PackageCatalog>& catalogs,
                                   const ArchiveCorpusOptions& options, ArchiveReport& report) {
  const Gathered g = gather(catalogs, options, report);
  const Packages p = index_packages(g.pairs);
  std::vector<bool> held(p.names.size(), false);
  std::vector<uint32_t> test, train;
  for (uint32_t k = 0; k < p.names.size(); ++k)
    if (debian::matches_any(p.names[k], options.test_packages)) {
      held[k] = true;
      test.push_back(k);
    }
  const auto valid = draw_valid(p, g.pairs, held, options.valid_pairs, options.seed);
  for (uint32_t k = 0; k < p.names.size(); ++k)
    if (!held[k]) train.push_back(k);
  ArchiveCorpus corpus;
  corpus.train = counted(g.pairs, p, train, nullptr, report);
  std::unordered_set<std::string> seen;
  for (const auto& c : corpus.train) seen.insert(c.pair.source);
  corpus.valid = counted(g.pairs, p, valid, &seen, report);
  corpus.test = counted(g.pairs, p, test, &seen, report);
  for (uint32_t k : valid) report.valid_packages.push_back(p.names[k]);
  for (uint32_t k : test) report.test_packages.push_back(p.names[k]);
  return corpus;
}

void write_counted_tsv(const std::string& path, const std::vector<CountedPair>& pairs) {
  write_file_atomic(path, [&](const ByteSink& sink) {
    std::string line;
    for (const auto& c : pairs) {
      line = c.pair.source + '\t' + c.pair.target + '\t' + std::to_string(c.count) + '\t' +
             c.package + '\n';
      sink(line.data(), line.size());
    }
  });
}

}  // namespace attnkit::data
