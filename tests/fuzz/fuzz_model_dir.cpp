// A model directory: config.json, source.vocab and target.vocab from the input (joined by
// "\n@@@@\n" in the seeds), the tiny model's weights; what loads must translate.

#include <filesystem>

#include "attnkit/core/error.h"
#include "attnkit/translate/translator.h"
#include "fuzz_input.h"

ATTNKIT_FUZZ_TARGET(model_dir) {
  using namespace attnkit;
  namespace fs = std::filesystem;
  const auto parts = fuzz::split(data, size, "\n@@@@\n", 3);
  static const fs::path dir = [] {
    const auto d = fuzz::scratch_dir() / "model";
    fs::create_directories(d);
    fs::copy_file(fs::path(ATTNKIT_TINY_MODEL_DIR) / "model.pt", d / "model.pt",
                  fs::copy_options::overwrite_existing);
    return d;
  }();
  const char* names[] = {"config.json", "source.vocab", "target.vocab"};
  for (size_t i = 0; i < 3; ++i)
    fuzz::write_file("model/" + std::string(names[i]), i < parts.size() ? parts[i] : "");
  try {
    translate::Translator translator(dir.string());
    decoding::SearchOptions options;
    options.beam_size = 2;
    translator.translate({"Open the file", ""}, options);
  } catch (const Error&) {
  }
  return 0;
}
