// `attnkit corpus debian`: every gettext catalog Debian's archive ships for a language, as a
// corpus with a manifest that makes it reproducible.

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>

#include "attnkit/core/error.h"
#include "attnkit/core/files.h"
#include "attnkit/data/archive_corpus.h"
#include "attnkit/data/debian.h"
#include "attnkit/po/protect.h"
#include "checks.h"
#include "corpus_commands.h"

namespace attnkit::cli {
namespace fs = std::filesystem;
namespace debian = data::debian;
namespace {

struct DebianArgs {
  std::string lang, out, cache;
  uint64_t max_download = 0;
  std::vector<std::string> exclude, test;
  size_t valid_pairs = 2000;
  uint64_t seed = 1;
  double max_length_ratio = 3;
  bool protected_form = false, quiet = false;
};

std::string default_cache() {
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg)
    return (fs::path(xdg) / "attnkit" / "debian").string();
  if (const char* home = std::getenv("HOME"); home && *home)
    return (fs::path(home) / ".cache" / "attnkit" / "debian").string();
  return (fs::temp_directory_path() / "attnkit-debian-cache").string();
}

std::string bytes_text(double b) {
  char buf[32];
  const char* units[] = {"B", "kB", "MB", "GB", "TB"};
  int u = 0;
  while (b >= 1000 && u < 4) b /= 1000, ++u;
  std::snprintf(buf, sizeof buf, u ? "%.1f %s" : "%.0f %s", b, units[u]);
  return buf;
}

// The download's bar on stderr: redrawn in place on a terminal, a line every 10 s in a log.
class FetchBar {
 public:
  explicit FetchBar(bool quiet) : quiet_(quiet), tty_(isatty(STDERR_FILENO)) {}
  void operator()(const debian::FetchProgress& p) {
    if (quiet_) return;
    const auto now = std::chrono::steady_clock::now();
    const bool done = p.packages_done == p.packages_total;
    if (now - last_ < std::chrono::milliseconds(tty_ ? 250 : 10000) && !done) return;
    last_ = now;
    const double seconds = std::chrono::duration<double>(now - start_).count();
    const double rate = seconds > 0 ? static_cast<double>(p.bytes_done) / seconds : 0;
    const double left = static_cast<double>(p.bytes_total - std::min(p.bytes_done, p.bytes_total));
    const int eta = rate > 0 ? static_cast<int>(left / rate) : 0;
    const double frac = p.bytes_total ? static_cast<double>(p.bytes_done) / p.bytes_total : 1.0;
    std::string bar(static_cast<size_t>(24 * std::min(frac, 1.0)), '=');
    bar.resize(24, ' ');
    std::fprintf(stderr,
                 "%sdownloading [%s] %zu/%zu packages, %s of %s, %s/s, ETA %d:%02d:%02d  %s%s",
                 tty_ ? "\r" : "", bar.c_str(), p.packages_done, p.packages_total,
                 bytes_text(static_cast<double>(p.bytes_done)).c_str(),
                 bytes_text(static_cast<double>(p.bytes_total)).c_str(), bytes_text(rate).c_str(),
                 eta / 3600, eta / 60 % 60, eta % 60, p.current.c_str(), tty_ ? "\033[K" : "\n");
    open_ = tty_;
  }
  void finish() {
    if (open_) std::fprintf(stderr, "\n");
    open_ = false;
  }

 private:
  bool quiet_, tty_, open_ = false;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now(),
                                        last_ = start_ - std::chrono::hours(1);
};

// The packages the index names, less the excluded ones, as apt would download them.
std::vector<debian::Package> find_packages(const DebianArgs& a, nlohmann::json& manifest) {
  const auto contents = debian::contents_files();
  if (!a.quiet) std::cerr << "reading apt's Contents index (" << contents.size() << " files)\n";
  auto index = debian::scan_contents(contents, a.lang);
  if (index.empty())
    throw Error("no package in apt's Contents index carries gettext catalogs for '" + a.lang +
                "' (language codes as the archive spells them: zh_CN, de, pt_BR, sr@latin)");
  std::vector<std::string> excluded;
  for (auto it = index.begin(); it != index.end();)
    if (debian::matches_any(it->first, a.exclude)) {
      excluded.push_back(it->first);
      it = index.erase(it);
    } else {
      ++it;
    }
  std::vector<std::string> unavailable;
  auto packages = debian::resolve_packages(index, &unavailable);
  std::vector<debian::Package> left_out;
  auto chosen = debian::select_packages(std::move(packages), a.max_download, &left_out);
  manifest["contents_index"] = contents;
  manifest["excluded"] = excluded;
  manifest["unavailable"] = unavailable;
  nlohmann::json over = nlohmann::json::array();
  for (const auto& p : left_out) over.push_back(p.name);
  manifest["over_budget"] = over;
  uint64_t total = 0;
  for (const auto& p : chosen) total += p.size;
  std::cout << index.size() + excluded.size() << " packages carry " << a.lang
            << " catalogs: " << chosen.size() << " chosen ("
            << bytes_text(static_cast<double>(total)) << "), " << excluded.size() << " excluded, "
            << left_out.size() << " over the budget, " << unavailable.size()
            << " not in apt's package lists\n";
  return chosen;
}

// Each package's catalogs under out/catalogs/<name>_<version>/, unpacked once.
std::vector<data::PackageCatalog> unpack(const DebianArgs& a,
                                         const std::vector<debian::Package>& packages,
                                         const std::vector<std::string>& debs) {
  const fs::path root = fs::path(a.out) / "catalogs";
  fs::create_directories(root);
  std::set<std::string> wanted;
  std::vector<data::PackageCatalog> catalogs;
  for (size_t i = 0; i < packages.size(); ++i) {
    const auto& p = packages[i];
    std::string folder = p.name + "_" + p.version;
    for (auto& c : folder)
      if (c == ':' || c == '/') c = '%';
    wanted.insert(folder);
    const fs::path dir = root / folder;
    std::vector<std::string> files;
    if (fs::is_directory(dir)) {  // unpacked whole by an earlier run (renamed when complete)
      for (auto it = fs::recursive_directory_iterator(dir);
           it != fs::recursive_directory_iterator(); ++it)
        if (it->is_regular_file() && !it->is_symlink())
          files.push_back(fs::relative(it->path(), dir).string());
      std::sort(files.begin(), files.end());
    } else {
      files = debian::extract_catalogs(debs[i], a.lang, dir.string());
    }
    for (const auto& f : files) catalogs.push_back({p.name, p.version, f, (dir / f).string()});
  }
  for (const auto& entry : fs::directory_iterator(root))  // left by a run with other choices
    if (!wanted.count(entry.path().filename().string())) fs::remove_all(entry.path());
  return catalogs;
}

void write_manifest(const DebianArgs& a, const std::vector<debian::Package>& packages,
                    const std::vector<data::PackageCatalog>& catalogs, const data::ArchiveReport& r,
                    const data::ArchiveCorpus& corpus, nlohmann::json manifest) {
  using nlohmann::json;
  manifest["lang"] = a.lang;
  manifest["options"] = {{"max_download", a.max_download},
                         {"exclude", a.exclude},
                         {"test", a.test},
                         {"valid_pairs", a.valid_pairs},
                         {"seed", a.seed},
                         {"max_length_ratio", a.max_length_ratio},
                         {"protected", a.protected_form}};
  std::map<std::string, json> by_package;
  for (const auto& p : packages)
    by_package[p.name] = {{"package", p.name},        {"version", p.version}, {"arch", p.arch},
                          {"filename", p.filename},   {"size", p.size},       {"sha256", p.sha256},
                          {"catalogs", json::array()}};
  for (size_t i = 0; i < catalogs.size(); ++i) {
    json c = {{"path", catalogs[i].path}, {"pairs", r.catalog_pairs[i]}};
    if (!r.catalog_errors[i].empty()) c["error"] = r.catalog_errors[i];
    by_package[catalogs[i].package]["catalogs"].push_back(c);
  }
  json list = json::array();
  for (auto& [name, p] : by_package) list.push_back(std::move(p));
  manifest["packages"] = std::move(list);
  manifest["valid_packages"] = r.valid_packages;
  manifest["test_packages"] = r.test_packages;
  const auto& g = r.gettext;
  manifest["summary"] = {{"catalogs", g.catalogs},
                         {"messages", g.entries},
                         {"skipped",
                          {{"untranslated", g.untranslated},
                           {"fuzzy", g.fuzzy},
                           {"placeholder_mismatch", g.placeholder_mismatch},
                           {"identical", g.identical},
                           {"unreadable", g.unreadable},
                           {"not_in_script", r.not_in_script},
                           {"length_ratio", r.length_ratio},
                           {"duplicates", r.duplicates},
                           {"seen_in_train", r.seen_in_train}}},
                         {"pairs",
                          {{"train", corpus.train.size()},
                           {"valid", corpus.valid.size()},
                           {"test", corpus.test.size()}}}};
  write_file_atomic((fs::path(a.out) / "manifest.json").string(), manifest.dump(1) + "\n");
}

int run_debian(const DebianArgs& a) {
  if (a.cache.empty()) throw Error("corpus debian: --cache must not be empty");
  fs::create_directories(a.out);
  nlohmann::json manifest;
  const auto packages = find_packages(a, manifest);
  FetchBar bar(a.quiet);
  debian::FetchOptions fetch;
  fetch.cache_dir = a.cache;
  fetch.on_progress = std::ref(bar);
  std::vector<std::string> debs;
  try {
    debs = debian::fetch_packages(packages, fetch);
  } catch (...) {
    bar.finish();
    throw;
  }
  bar.finish();
  if (!a.quiet) std::cerr << "unpacking the catalogs into " << a.out << "/catalogs\n";
  const auto catalogs = unpack(a, packages, debs);

  data::ArchiveCorpusOptions options;
  options.lang = a.lang;
  options.test_packages = a.test;
  options.valid_pairs = a.valid_pairs;
  options.seed = a.seed;
  options.max_length_ratio = a.max_length_ratio;
  if (a.protected_form)
    options.transform = [](data::Pair& pair) {
      if (auto masked = po::protect_pair(pair.source, pair.target))
        pair = {masked->first, masked->second, pair.extra};
    };
  data::ArchiveReport report;
  const auto corpus = data::build_archive_corpus(catalogs, options, report);
  const fs::path out = a.out;
  data::write_counted_tsv((out / "train.tsv").string(), corpus.train);
  data::write_counted_tsv((out / "valid.tsv").string(), corpus.valid);
  if (!a.test.empty()) data::write_counted_tsv((out / "test.tsv").string(), corpus.test);
  write_manifest(a, packages, catalogs, report, corpus, manifest);

  const auto& g = report.gettext;
  std::cout << "read " << g.catalogs << " catalogs (" << g.entries << " messages)\n"
            << "  skipped: " << g.untranslated << " untranslated, " << g.fuzzy << " fuzzy, "
            << g.placeholder_mismatch << " with mismatched placeholders, " << g.identical
            << " identical to the English, " << report.not_in_script << " not in " << a.lang
            << "'s script, " << report.length_ratio << " length-ratio outliers, "
            << report.duplicates << " duplicates (counted), " << report.seen_in_train
            << " validation/test pairs whose English training has, " << g.unreadable
            << " unreadable\n"
            << "wrote " << corpus.train.size() << " training pairs to "
            << (out / "train.tsv").string() << ", " << corpus.valid.size()
            << " validation pairs from " << report.valid_packages.size() << " packages to "
            << (out / "valid.tsv").string();
  if (!a.test.empty())
    std::cout << ", " << corpus.test.size() << " test pairs from " << report.test_packages.size()
              << " packages to " << (out / "test.tsv").string();
  std::cout << "; manifest in " << (out / "manifest.json").string() << "\n";
  return corpus.train.empty() ? 2 : 0;
}

}  // namespace

CLI::App* add_corpus_debian_command(CLI::App* parent, std::function<int()>& run) {
  auto a = std::make_shared<DebianArgs>();
  a->cache = default_cache();
  auto* app = parent->add_subcommand(
      "debian",
      "English -> LANG pairs from every gettext catalog of Debian's archive (apt's Contents "
      "index, packages downloaded by apt)");
  app->add_option("--lang", a->lang,
                  "Catalog language as the archive spells it: zh_CN, de, ja, "
                  "pt_BR, sr@latin ...")
      ->required();
  app->add_option("--out", a->out,
                  "Output directory: train.tsv, valid.tsv, test.tsv, manifest.json, catalogs/")
      ->required();
  app->add_option("--cache", a->cache, "Where downloaded packages are kept for later runs")
      ->capture_default_str();
  app->add_option("--max-download", a->max_download,
                  "Download budget (e.g. 500MB, 2GB; 0: everything): the translation packages "
                  "(*-l10n-*) first, then the most catalogs per byte")
      ->transform(CLI::AsSizeValue(true));
  app->add_option("--exclude", a->exclude, "Leave out packages matching GLOB (repeatable)");
  app->add_option("--test", a->test,
                  "Hold out packages matching GLOB: their pairs whose English training does not "
                  "have go to test.tsv (repeatable)");
  app->add_option("--valid-pairs", a->valid_pairs,
                  "Validation pairs, from whole packages drawn by --seed (0: none)")
      ->capture_default_str();
  app->add_option("--seed", a->seed, "Which packages validate")->capture_default_str();
  app->add_option("--max-length-ratio", a->max_length_ratio,
                  "Drop pairs whose length ratio is this many times off the language's median "
                  "(0: keep all)")
      ->check(checks::non_negative())
      ->capture_default_str();
  app->add_flag("--protected", a->protected_form,
                "Pairs in the form po translate gives the model (as corpus gettext --protected)");
  app->add_flag("--quiet", a->quiet, "No progress bar");
  run = [a] { return run_debian(*a); };
  return app;
}

}  // namespace attnkit::cli
