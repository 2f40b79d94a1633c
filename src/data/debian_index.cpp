// Which packages of Debian's archive carry a language's catalogs: apt's Contents index, and the
// package lists' candidate of each.

#include <fnmatch.h>
#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <sstream>

#include "attnkit/core/error.h"
#include "attnkit/core/process.h"
#include "attnkit/data/debian.h"

namespace attnkit::data::debian {
namespace fs = std::filesystem;
namespace {

constexpr const char* kAptHelper = "/usr/lib/apt/apt-helper";

// apt's last words: its error lines, else the end of what it said.
std::string apt_message(const ProcessResult& r) {
  std::string errors;
  std::istringstream in(r.err);
  for (std::string line; std::getline(in, line);)
    if (line.rfind("E: ", 0) == 0) errors += (errors.empty() ? "" : "; ") + line.substr(3);
  if (!errors.empty()) return errors;
  std::string all = r.err.empty() ? r.out : r.err;
  while (!all.empty() && all.back() == '\n') all.pop_back();
  return all.size() > 400 ? "..." + all.substr(all.size() - 400) : all;
}

// %3a in apt's file names is the epoch's colon.
std::string unescape(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && std::isxdigit(static_cast<unsigned char>(s[i + 1])) &&
        std::isxdigit(static_cast<unsigned char>(s[i + 2]))) {
      out += static_cast<char>(std::stoi(s.substr(i + 1, 2), nullptr, 16));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

struct TempDir {
  std::string path;
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "attnkit-apt-XXXXXX").string();
    if (!mkdtemp(pattern.data())) throw Error("cannot create a temporary directory");
    path = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

std::set<std::string> known_package_names() {
  std::set<std::string> names;
  ProcessOptions o;
  o.on_line = [&](std::string_view line) { names.emplace(line); };
  const auto r = run_process({"apt-cache", "pkgnames"}, o);
  if (!r.ok()) throw Error("apt-cache pkgnames failed: " + apt_message(r));
  return names;
}

// --print-uris for `names`; false when apt refused the whole list.
bool print_uris(const std::vector<std::string>& names, const std::string& dir,
                std::vector<Package>& out) {
  std::vector<std::string> argv = {"apt-get", "download", "--print-uris"};
  argv.insert(argv.end(), names.begin(), names.end());
  ProcessOptions o;
  o.cwd = dir;  // apt prints nothing for a file already in the working directory
  const auto r = run_process(argv, o);
  if (!r.ok()) return false;
  std::istringstream in(r.out);
  for (std::string line; std::getline(in, line);) {
    Package p;
    if (parse_print_uris_line(line, p)) out.push_back(std::move(p));
  }
  return true;
}

bool is_l10n(const std::string& name) {
  return name.find("-l10n-") != std::string::npos ||
         (name.size() > 5 && name.compare(name.size() - 5, 5, "-l10n") == 0);
}

}  // namespace

bool is_catalog_of(const std::string& path, const std::string& lang) {
  const std::string marker = lang + "/LC_MESSAGES/";
  if (path.size() < 3 || path.compare(path.size() - 3, 3, ".mo") != 0) return false;
  for (size_t at = path.find(marker); at != std::string::npos; at = path.find(marker, at + 1)) {
    if (at != 0 && path[at - 1] != '/') continue;
    if (path.find('/', at + marker.size()) == std::string::npos) return true;
  }
  return false;
}

void add_contents_line(const std::string& line, const std::string& lang, CatalogIndex& index) {
  if (line.find("/LC_MESSAGES/") == std::string::npos) return;
  // The path may hold spaces; the package list is the last field.
  const auto end = line.find_last_not_of(" \t\r");
  if (end == std::string::npos) return;
  const auto gap = line.find_last_of(" \t", end);
  if (gap == std::string::npos) return;
  const auto path_end = line.find_last_not_of(" \t", gap);
  if (path_end == std::string::npos) return;
  const std::string path = line.substr(0, path_end + 1);
  if (!is_catalog_of(path, lang)) return;
  std::istringstream packages(line.substr(gap + 1, end - gap));
  for (std::string item; std::getline(packages, item, ',');) {
    const auto slash = item.rfind('/');
    const std::string name = slash == std::string::npos ? item : item.substr(slash + 1);
    if (!name.empty()) index[name].push_back(path);
  }
}

std::vector<std::string> contents_files() {
  const auto r = run_process(
      {"apt-get", "indextargets", "--format", "$(FILENAME)", "Identifier: Contents-deb"});
  if (!r.ok()) throw Error("apt-get indextargets failed: " + apt_message(r));
  std::vector<std::string> files;
  std::istringstream in(r.out);
  for (std::string line; std::getline(in, line);)
    if (!line.empty() && fs::exists(line)) files.push_back(line);
  if (files.empty())
    throw Error(
        "apt has no Contents index, which lists the files of every package (the catalogs are "
        "found through it): install apt-file and fetch the indexes, as root: apt-get install "
        "apt-file && apt-get update");
  std::sort(files.begin(), files.end());
  return files;
}

CatalogIndex scan_contents(const std::vector<std::string>& files, const std::string& lang) {
  CatalogIndex index;
  for (const auto& file : files) {
    ProcessOptions o;
    o.on_line = [&](std::string_view line) { add_contents_line(std::string(line), lang, index); };
    const auto r = run_process({kAptHelper, "cat-file", file}, o);
    if (!r.ok()) throw Error(file + ": cannot read this Contents index: " + apt_message(r));
  }
  for (auto& [name, paths] : index) {
    std::sort(paths.begin(), paths.end());
    paths.erase(std::unique(paths.begin(), paths.end()), paths.end());
  }
  return index;
}

bool parse_print_uris_line(const std::string& line, Package& p) {
  if (line.size() < 2 || line[0] != '\'') return false;
  const auto close = line.find('\'', 1);
  if (close == std::string::npos) return false;
  p.uri = line.substr(1, close - 1);
  std::istringstream rest(line.substr(close + 1));
  std::string hash;
  if (!(rest >> p.filename >> p.size >> hash)) return false;
  if (hash.rfind("SHA256:", 0) != 0) return false;
  p.sha256 = hash.substr(7);
  // name_version_arch.deb
  const std::string stem = p.filename.substr(0, p.filename.rfind(".deb"));
  const auto first = stem.find('_'), last = stem.rfind('_');
  if (first == std::string::npos || last == first) return false;
  p.name = stem.substr(0, first);
  p.version = unescape(stem.substr(first + 1, last - first - 1));
  p.arch = stem.substr(last + 1);
  return true;
}

std::vector<Package> resolve_packages(const CatalogIndex& index,
                                      std::vector<std::string>* unavailable) {
  const auto known = known_package_names();
  std::vector<std::string> names;
  for (const auto& [name, paths] : index) {
    if (known.count(name))
      names.push_back(name);
    else if (unavailable)
      unavailable->push_back(name);
  }
  TempDir dir;
  std::vector<Package> packages;
  constexpr size_t kChunk = 200;
  for (size_t start = 0; start < names.size(); start += kChunk) {
    const std::vector<std::string> chunk(
        names.begin() + static_cast<long>(start),
        names.begin() + static_cast<long>(std::min(names.size(), start + kChunk)));
    if (print_uris(chunk, dir.path, packages)) continue;
    for (const auto& name : chunk)  // one name apt cannot select fails the whole list
      if (!print_uris({name}, dir.path, packages) && unavailable) unavailable->push_back(name);
  }
  for (auto& p : packages) {
    auto it = index.find(p.name);
    if (it != index.end()) p.catalogs = it->second;
  }
  std::sort(packages.begin(), packages.end(),
            [](const Package& a, const Package& b) { return a.name < b.name; });
  if (unavailable) std::sort(unavailable->begin(), unavailable->end());
  return packages;
}

bool matches_any(const std::string& name, const std::vector<std::string>& globs) {
  for (const auto& g : globs)
    if (fnmatch(g.c_str(), name.c_str(), 0) == 0) return true;
  return false;
}

std::vector<Package> select_packages(std::vector<Package> packages, uint64_t max_bytes,
                                     std::vector<Package>* left_out) {
  auto density = [](const Package& p) {
    return static_cast<double>(p.catalogs.size()) /
           static_cast<double>(std::max<uint64_t>(p.size, 1));
  };
  std::sort(packages.begin(), packages.end(), [&](const Package& a, const Package& b) {
    if (is_l10n(a.name) != is_l10n(b.name)) return is_l10n(a.name);
    if (density(a) != density(b)) return density(a) > density(b);
    return a.name < b.name;
  });
  std::vector<Package> chosen;
  uint64_t total = 0;
  for (auto& p : packages) {
    if (max_bytes == 0 || total + p.size <= max_bytes) {
      total += p.size;
      chosen.push_back(std::move(p));
    } else if (left_out) {
      left_out->push_back(std::move(p));
    }
  }
  auto by_name = [](const Package& a, const Package& b) { return a.name < b.name; };
  std::sort(chosen.begin(), chosen.end(), by_name);
  if (left_out) std::sort(left_out->begin(), left_out->end(), by_name);
  return chosen;
}

}  // namespace attnkit::data::debian
