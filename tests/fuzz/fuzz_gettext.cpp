// The gettext readers: .mo (either byte order) and .po (contexts, plurals, continuations,
// escapes), then the pairs the corpus takes from them. The first byte picks the reader.

#include "attnkit/core/error.h"
#include "attnkit/data/gettext.h"
#include "fuzz_input.h"

ATTNKIT_FUZZ_TARGET(gettext) {
  using namespace attnkit;
  if (size == 0) return 0;
  const bool mo = data[0] & 1;
  const std::string path = fuzz::write_file(
      mo ? "input.mo" : "input.po", std::string(reinterpret_cast<const char*>(data) + 1, size - 1));
  try {
    const auto entries = mo ? data::read_mo(path) : data::read_po(path);
    data::GettextReport report;
    data::pairs_from_catalog(entries, report);
  } catch (const Error&) {
  }
  return 0;
}
