#pragma once

// Shared by the fuzz targets: the input as a file (the readers take paths, as the CLI gives them),
// and the input split into parts.
//
// Every target holds the readers to one rule: bad input is an attnkit::Error (a message naming
// the file, line or key); anything else that escapes (std::out_of_range, bad_alloc, a c10::Error
// with no file in it) is a finding, as is every sanitizer report.

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

// ATTNKIT_FUZZ_TARGET(name) { ... data, size ... }: with libFuzzer (make fuzz, clang), the
// target's LLVMFuzzerTestOneInput; in the ordinary build, an entry of attnkit_fuzz_replay, which
// CTest runs on each target's committed corpus (tests/fuzz/corpus/<name>/).
#ifdef ATTNKIT_LIBFUZZER
#define ATTNKIT_FUZZ_TARGET(name) \
  extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)
#else
#define ATTNKIT_FUZZ_TARGET(name)                                                             \
  static int fuzz_##name(const uint8_t* data, size_t size);                                   \
  static const bool registered_##name = ::attnkit::fuzz::register_target(#name, fuzz_##name); \
  static int fuzz_##name(const uint8_t* data, size_t size)
#endif

namespace attnkit::fuzz {

using Target = int (*)(const uint8_t* data, size_t size);

inline std::map<std::string, Target>& targets() {
  static std::map<std::string, Target> all;
  return all;
}

inline bool register_target(const char* name, Target target) {
  targets()[name] = target;
  return true;
}

// A directory of this process's own, in memory when /dev/shm is there.
inline const std::filesystem::path& scratch_dir() {
  static const std::filesystem::path dir = [] {
    const std::filesystem::path base = std::filesystem::is_directory("/dev/shm")
                                           ? "/dev/shm"
                                           : std::filesystem::temp_directory_path();
    auto d = base / ("attnkit-fuzz-" + std::to_string(getpid()));
    std::filesystem::create_directories(d);
    return d;
  }();
  // libFuzzer ends with exit(): the scratch files go with the process. Registered once `dir` is
  // built, so the handler runs before `dir` is destroyed.
  static const bool cleanup = std::atexit([] {
                                std::error_code ignored;
                                std::filesystem::remove_all(dir, ignored);
                              }) == 0;
  (void)cleanup;
  return dir;
}

inline std::string write_file(const std::string& name, const std::string& bytes) {
  const auto path = (scratch_dir() / name).string();
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(bytes.data(), bytes.size());
  return path;
}

// The input cut at every occurrence of `separator`: a seed is written as its parts joined by
// it, so the fuzzer can mutate each part and, rarely, the separators themselves.
inline std::vector<std::string> split(const uint8_t* data, size_t size,
                                      const std::string& separator, size_t max_parts) {
  const std::string all(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> parts;
  size_t start = 0;
  while (parts.size() + 1 < max_parts) {
    const size_t at = all.find(separator, start);
    if (at == std::string::npos) break;
    parts.push_back(all.substr(start, at - start));
    start = at + separator.size();
  }
  parts.push_back(all.substr(start));
  return parts;
}

}  // namespace attnkit::fuzz
