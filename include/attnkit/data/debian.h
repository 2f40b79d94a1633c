#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

// Debian's archive as a corpus: every gettext catalog it ships for a language, found through
// apt's Contents index, downloaded by apt into a cache, and paired message by message with the
// English. Only Debian's own tools are used (apt-get, apt-helper, dpkg-deb, tar, sha256sum): the
// machine's apt configuration says where the archive is (APT_CONFIG points apt elsewhere, as
// the tests do with a small archive of their own).
namespace attnkit::data::debian {

// package -> the paths of its catalogs for one language, as the Contents index lists them
// ("usr/share/locale/de/LC_MESSAGES/coreutils.mo"), sorted.
using CatalogIndex = std::map<std::string, std::vector<std::string>>;

// Whether `path` is a compiled catalog of `lang`: ".../<lang>/LC_MESSAGES/<name>.mo", the
// language's folder exactly (de is not de_AT; sr@latin is its own).
bool is_catalog_of(const std::string& path, const std::string& lang);

// Adds the catalogs of `lang` that one line of a Contents index lists: "<path> <packages>",
// where <packages> is "section/name[,section/name...]" after whitespace.
void add_contents_line(const std::string& line, const std::string& lang, CatalogIndex& index);

// The Contents indexes apt has fetched (`apt-get indextargets`; apt-file's configuration asks
// `apt-get update` for them). Throws attnkit::Error saying how to get them when there are none.
std::vector<std::string> contents_files();

// Every package that carries catalogs of `lang`, from the given Contents files (decompressed by
// apt-helper, whatever their compression).
CatalogIndex scan_contents(const std::vector<std::string>& files, const std::string& lang);

// A package as apt would download it (`apt-get download --print-uris`).
struct Package {
  std::string name, version, arch;
  std::string uri, filename, sha256;  // filename: the name apt gives the file in the cache
  uint64_t size = 0;                  // bytes
  std::vector<std::string> catalogs;  // from the Contents index
};

// apt's candidate of each named package that apt knows; `unavailable` gets the others (a
// Contents index newer or older than the package lists). Throws attnkit::Error naming apt's
// message when apt cannot answer.
std::vector<Package> resolve_packages(const CatalogIndex& index,
                                      std::vector<std::string>* unavailable = nullptr);

// Parses one line of --print-uris: "'URI' filename size SHA256:hex". False if it is not one.
bool parse_print_uris_line(const std::string& line, Package& out);

// glob(7) patterns on package names, as dpkg and apt take them.
bool matches_any(const std::string& name, const std::vector<std::string>& globs);

// Which packages to fetch: those not excluded, the translation packages (*-l10n-*, *-l10n)
// first, then by catalogs per byte, while the total size stays within max_bytes (0: no budget).
// Deterministic: the same index and options choose the same packages. `left_out` gets the
// packages the budget dropped.
std::vector<Package> select_packages(std::vector<Package> packages, uint64_t max_bytes,
                                     std::vector<Package>* left_out = nullptr);

// What a long fetch reports, for a progress bar.
struct FetchProgress {
  uint64_t bytes_done = 0, bytes_total = 0;  // of the packages this run downloads
  size_t packages_done = 0, packages_total = 0;
  size_t cached = 0;    // packages found in the cache, downloaded by an earlier run
  std::string current;  // the package being downloaded or unpacked
  bool extracting = false;
};

struct FetchOptions {
  std::string cache_dir;               // the .deb files: a second run (any language) reuses them
  size_t batch = 128;                  // packages per apt-get download, at most
  uint64_t batch_bytes = 200'000'000;  // and bytes (a batch is at least one package)
  std::function<void(const FetchProgress&)> on_progress;
};

// Downloads what is not in the cache yet into cache_dir/partial/, checks each file's size and
// SHA-256 against apt's, and only then moves it into cache_dir: an interrupted run leaves no
// file that a rerun takes for whole. Returns the path of each package's file, in order.
std::vector<std::string> fetch_packages(const std::vector<Package>& packages,
                                        const FetchOptions& options);

// The catalogs of `lang` in a .deb, unpacked (dpkg-deb | tar) into `dir`, which is created
// whole (a temporary beside it, renamed when done). Symbolic links are left out: they name a
// catalog that is also there as a file, or one outside the package. Returns the regular files,
// relative to `dir`, sorted.
std::vector<std::string> extract_catalogs(const std::string& deb, const std::string& lang,
                                          const std::string& dir);

}  // namespace attnkit::data::debian
