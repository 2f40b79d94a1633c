// The torch.save reader: zip container, pickle (the unpickler), storages, tensor views.
// Seeds: tests/fuzz/corpus/pt_file (small torch.save files of each kind, and the notes' fixtures).

#include "attnkit/core/error.h"
#include "attnkit/io/pt_file.h"
#include "fuzz_input.h"

ATTNKIT_FUZZ_TARGET(pt_file) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  try {
    attnkit::io::load_bytes(bytes, "input.pt");
  } catch (const attnkit::Error&) {
  }
  try {
    attnkit::io::load_tensor_dict(attnkit::fuzz::write_file("input.pt", bytes));
  } catch (const attnkit::Error&) {
  }
  return 0;
}
