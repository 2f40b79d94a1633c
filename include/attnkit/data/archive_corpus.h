#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "attnkit/data/corpus.h"
#include "attnkit/data/gettext.h"

// A corpus from many packages' catalogs (Debian's archive: data/debian.h): every message once,
// with the number of catalogs that carry it, and validation and test sets of whole packages
// whose English training never saw.
namespace attnkit::data {

// One catalog of one package, on disk.
struct PackageCatalog {
  std::string package, version;
  std::string path;  // inside the package: usr/share/locale/de/LC_MESSAGES/coreutils.mo
  std::string file;  // where it is on this disk
};

struct ArchiveCorpusOptions {
  std::string lang;  // the catalogs' language (for the script check)
  std::vector<std::string>
      test_packages;  // glob(7)s: these packages' unseen pairs are the test set
  // Whole packages, drawn in the seed's order, give the validation set until their unseen pairs
  // reach this many (0: none).
  size_t valid_pairs = 2000;
  uint64_t seed = 1;
  double max_length_ratio = 3;  // data/pair_filters.h; 0: off
  // Applied to each pair that passed the filters, before duplicates are counted (the CLI's
  // --protected puts pairs in po::protect_pair's form here).
  std::function<void(Pair&)> transform;
};

// A pair, the catalogs that carry it, and the first package (in name order) that does.
struct CountedPair {
  Pair pair;
  size_t count = 1;
  std::string package;
};

struct ArchiveReport {
  GettextReport gettext;  // the per-message filters of corpus gettext, summed over catalogs
  size_t not_in_script = 0, length_ratio = 0;
  size_t duplicates = 0;     // the same pair again from another catalog (in its count instead)
  size_t seen_in_train = 0;  // validation and test pairs dropped: training has their English
  std::vector<size_t> catalog_pairs;        // the pairs each catalog gave, in input order
  std::vector<std::string> catalog_errors;  // why a catalog could not be read, or ""
  std::vector<std::string> valid_packages, test_packages;
};

struct ArchiveCorpus {
  std::vector<CountedPair> train, valid, test;
};

ArchiveCorpus build_archive_corpus(const std::vector<PackageCatalog>& catalogs,
                                   const ArchiveCorpusOptions& options, ArchiveReport& report);

// source<TAB>target<TAB>count<TAB>package, through a temporary file and a rename. read_tsv
// reads it back (the count as the pair's `extra`).
void write_counted_tsv(const std::string& path, const std::vector<CountedPair>& pairs);

}  // namespace attnkit::data
