#include "model_dir.h"

#include <filesystem>

#include "attnkit/core/error.h"

namespace attnkit::cli {
namespace fs = std::filesystem;

void prepare_new_model_dir(const std::string& command, const std::string& model,
                           const std::string& out) {
  if (fs::exists(out) && fs::equivalent(out, model))
    throw Error(command + ": --out must be a new directory, not the model directory " + model);
  for (const char* file : {"config.json", "model.pt"})
    if (fs::exists(fs::path(out) / file))
      throw Error(command + ": " + out + " already holds a model (" +
                  (fs::path(out) / file).string() + "); name a new directory");
  fs::create_directories(out);
}

void copy_model_description(const std::string& model, const std::string& out) {
  for (const auto& entry : fs::directory_iterator(model)) {
    if (!entry.is_regular_file()) continue;
    const auto name = entry.path().filename().string();
    if (name == "config.json" || entry.path().extension() == ".vocab" ||
        name.find(".spm.") != std::string::npos)
      fs::copy_file(entry.path(), fs::path(out) / name, fs::copy_options::overwrite_existing);
  }
}

}  // namespace attnkit::cli
