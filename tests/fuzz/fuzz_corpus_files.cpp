// The corpus files: TSV pairs (lenient and strict, either direction), sentence-per-line input,
// and the vocabulary file.

#include "attnkit/core/error.h"
#include "attnkit/data/corpus.h"
#include "attnkit/data/vocab.h"
#include "fuzz_input.h"

ATTNKIT_FUZZ_TARGET(corpus_files) {
  using namespace attnkit;
  const std::string path =
      fuzz::write_file("input.txt", std::string(reinterpret_cast<const char*>(data), size));
  for (bool strict : {false, true}) {
    try {
      data::TsvOptions options;
      options.strict = strict;
      options.reverse = size % 2;
      data::ReadReport report;
      data::read_tsv(path, options, &report);
    } catch (const Error&) {
    }
  }
  try {
    data::read_lines(path, /*max_line_bytes=*/4096);
  } catch (const Error&) {
  }
  try {
    const auto vocab = data::Vocab::load(path);
    vocab.encode({"<unk>", "the", ""});
  } catch (const Error&) {
  }
  return 0;
}
