#include "model_dir.h"

#include <filesystem>

#include "attnkit/core/error.h"

namespace attnkit::cli {
namespace fs = std::filesystem;

NewModelDir::NewModelDir(const std::string& command, const std::string& model,
                         const std::string& out)
    : out_(out), staging_(fs::path(out).lexically_normal().string() + ".partial") {
  if (fs::exists(out) && fs::equivalent(out, model))
    throw Error(command + ": --out must be a new directory, not the model directory " + model);
  for (const char* file : {"config.json", "model.pt"})
    if (fs::exists(fs::path(out) / file))
      throw Error(command + ": " + out + " already holds a model (" +
                  (fs::path(out) / file).string() + "); name a new directory");
  if (fs::exists(out) && !fs::is_empty(out))
    throw Error(command + ": " + out + " is not empty; name a new directory");
  fs::remove_all(staging_);  // what a killed run left
  fs::create_directories(staging_);
  for (const auto& entry : fs::directory_iterator(model)) {
    if (!entry.is_regular_file()) continue;
    const auto name = entry.path().filename().string();
    if (name == "config.json" || entry.path().extension() == ".vocab" ||
        name.find(".spm.") != std::string::npos)
      fs::copy_file(entry.path(), fs::path(staging_) / name, fs::copy_options::overwrite_existing);
  }
}

NewModelDir::~NewModelDir() {
  if (committed_) return;
  std::error_code ec;
  fs::remove_all(staging_, ec);
}

void NewModelDir::commit() {
  if (fs::exists(out_)) fs::remove(out_);  // empty (checked above): rename will not replace it
  fs::rename(staging_, out_);
  committed_ = true;
}

}  // namespace attnkit::cli
