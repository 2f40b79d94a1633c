// attnkit_fuzz_replay TARGET PATH...: runs a fuzz target once on every file under the paths (its
// corpus: the seeds and every input a fuzzing run found), as libFuzzer does when given files. A
// crash or an escaped exception fails the run, naming the file.

#include <algorithm>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>

#include "fuzz_input.h"

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  const auto& all = attnkit::fuzz::targets();
  const auto target = argc > 1 ? all.find(argv[1]) : all.end();
  if (argc < 3 || target == all.end()) {
    std::cerr << "usage: attnkit_fuzz_replay TARGET PATH...; targets:";
    for (const auto& [name, fn] : all) std::cerr << ' ' << name;
    std::cerr << '\n';
    return 2;
  }
  std::vector<fs::path> files;
  for (int i = 2; i < argc; ++i) {
    if (fs::is_directory(argv[i])) {
      for (const auto& e : fs::recursive_directory_iterator(argv[i]))
        if (e.is_regular_file()) files.push_back(e.path());
    } else {
      files.emplace_back(argv[i]);
    }
  }
  std::sort(files.begin(), files.end());
  for (const auto& file : files) {
    std::ifstream in(file, std::ios::binary);
    const std::string bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    try {
      target->second(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
    } catch (const std::exception& e) {
      std::cerr << file.string() << ": escaped " << e.what() << '\n';
      return 1;
    }
  }
  std::cout << argv[1] << ": " << files.size() << " inputs, no crash\n";
  return files.empty() ? 1 : 0;
}
