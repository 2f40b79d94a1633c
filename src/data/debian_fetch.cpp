// Downloading packages into a cache that survives interruptions, and unpacking their catalogs.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <future>
#include <map>
#include <sstream>

#include "attnkit/core/error.h"
#include "attnkit/core/process.h"
#include "attnkit/data/debian.h"

namespace attnkit::data::debian {
namespace fs = std::filesystem;
namespace {

std::string last_lines(const std::string& text, size_t max_chars = 600) {
  std::string s = text;
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s.size() > max_chars ? "..." + s.substr(s.size() - max_chars) : s;
}

uint64_t size_or_zero(const fs::path& p) {
  std::error_code ec;
  const auto n = fs::file_size(p, ec);
  return ec ? 0 : n;
}

// The SHA-256 of each file (coreutils' sha256sum), by path.
std::map<std::string, std::string> sha256_of(const std::vector<std::string>& files) {
  std::map<std::string, std::string> sums;
  if (files.empty()) return sums;
  std::vector<std::string> argv = {"sha256sum", "--"};
  argv.insert(argv.end(), files.begin(), files.end());
  const auto r = run_process(argv);
  std::istringstream in(r.out);
  for (std::string line; std::getline(in, line);) {
    const auto gap = line.find("  ");
    if (gap != std::string::npos) sums[line.substr(gap + 2)] = line.substr(0, gap);
  }
  return sums;
}

// One apt-get download of `batch`, with the bytes reported as they arrive. Returns apt's result.
ProcessResult download_batch(const std::vector<const Package*>& batch, const fs::path& partial,
                             FetchProgress& progress, const FetchOptions& options) {
  std::vector<std::string> argv = {"apt-get", "download", "-q"};
  for (const auto* p : batch) argv.push_back(p->name + "=" + p->version);
  ProcessOptions o;
  o.cwd = partial.string();
  auto running = std::async(std::launch::async, [argv, o] { return run_process(argv, o); });
  const uint64_t base = progress.bytes_done;
  while (running.wait_for(std::chrono::milliseconds(250)) != std::future_status::ready) {
    uint64_t now = 0;
    for (const auto* p : batch) now += std::min(size_or_zero(partial / p->filename), p->size);
    progress.bytes_done = base + now;
    progress.current = batch.front()->name;
    if (options.on_progress) options.on_progress(progress);
  }
  return running.get();
}

}  // namespace

std::vector<std::string> fetch_packages(const std::vector<Package>& packages,
                                        const FetchOptions& options) {
  const fs::path cache = options.cache_dir, partial = cache / "partial";
  fs::create_directories(partial);
  FetchProgress progress;
  std::vector<const Package*> missing;
  std::vector<std::string> paths;
  for (const auto& p : packages) {
    paths.push_back((cache / p.filename).string());
    if (size_or_zero(cache / p.filename) == p.size && p.size > 0) {
      ++progress.cached;
    } else {
      missing.push_back(&p);
      progress.bytes_total += p.size;
    }
  }
  progress.packages_total = missing.size();
  if (options.on_progress) options.on_progress(progress);
  for (size_t start = 0, end; start < missing.size(); start = end) {
    // A batch of packages up to options.batch of them or options.batch_bytes: apt-get takes
    // about a second to start, which small packages would otherwise wait on.
    uint64_t bytes = 0;
    for (end = start; end < missing.size() && end - start < std::max<size_t>(1, options.batch) &&
                      (end == start || bytes + missing[end]->size <= options.batch_bytes);
         ++end)
      bytes += missing[end]->size;
    const std::vector<const Package*> batch(missing.begin() + static_cast<long>(start),
                                            missing.begin() + static_cast<long>(end));
    const uint64_t before = progress.bytes_done;  // the packages done so far
    const auto result = download_batch(batch, partial, progress, options);
    // Whatever arrived whole goes into the cache, even when apt failed on another package.
    std::vector<std::string> arrived;
    for (const auto* p : batch)
      if (size_or_zero(partial / p->filename) == p->size)
        arrived.push_back((partial / p->filename).string());
    const auto sums = sha256_of(arrived);
    std::string damaged;
    progress.bytes_done = before;
    for (const auto* p : batch) {
      const fs::path file = partial / p->filename;
      auto it = sums.find(file.string());
      if (it != sums.end() && it->second == p->sha256) {
        fs::rename(file, cache / p->filename);
        progress.bytes_done += p->size;
        ++progress.packages_done;
      } else if (it != sums.end()) {
        damaged += (damaged.empty() ? "" : ", ") + p->filename;
        fs::remove(file);
      }
    }
    if (options.on_progress) options.on_progress(progress);
    if (!damaged.empty())
      throw Error("downloaded " + damaged +
                  " does not have the SHA-256 apt's package list gives "
                  "(removed; run the command again to download it again)");
    if (!result.ok())
      throw Error("apt-get download failed (exit code " + std::to_string(result.exit_code) +
                  "): " + last_lines(result.err.empty() ? result.out : result.err) + "\n" +
                  std::to_string(progress.cached + progress.packages_done) + " of " +
                  std::to_string(packages.size()) + " packages are in " + cache.string() +
                  "; run the command again to go on from there");
  }
  return paths;
}

std::vector<std::string> extract_catalogs(const std::string& deb, const std::string& lang,
                                          const std::string& dir) {
  const fs::path target = dir, tmp = dir + ".partial";
  std::error_code ec;
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp);
  const auto r =
      run_pipeline({"dpkg-deb", "--fsys-tarfile", deb},
                   {"tar", "-x", "-C", tmp.string(), "--no-same-owner", "--no-same-permissions",
                    "--wildcards", "*/" + lang + "/LC_MESSAGES/*.mo"});
  // tar says "Not found in archive" (exit 2) when the package has none (an index out of date).
  const bool none = r.exit_code == 2 && r.err.find("Not found in archive") != std::string::npos;
  if (!r.ok() && !none) {
    fs::remove_all(tmp, ec);
    throw Error(deb + ": cannot unpack its catalogs: " + last_lines(r.err));
  }
  std::vector<std::string> files;
  for (auto it = fs::recursive_directory_iterator(tmp); it != fs::recursive_directory_iterator();
       ++it) {
    if (it->is_symlink() || !it->is_regular_file()) continue;
    const std::string relative = fs::relative(it->path(), tmp).string();
    if (is_catalog_of(relative, lang)) files.push_back(relative);
  }
  std::sort(files.begin(), files.end());
  fs::remove_all(target, ec);
  fs::rename(tmp, target);
  return files;
}

}  // namespace attnkit::data::debian
