#include "attnkit/translate/model_dir.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "architectures.h"
#include "attnkit/core/error.h"
#include "attnkit/core/files.h"
#include "attnkit/version.h"

namespace attnkit::translate {
namespace fs = std::filesystem;
using nlohmann::json;

void save_config(const std::string& dir, const ModelConfig& c) {
  json j = {{"attnkit_version", kVersion},
            {"arch", to_string(c.arch)},
            {"source_tokenizer", c.source_tokenizer},
            {"target_tokenizer", c.target_tokenizer},
            {"compute_type", kernels::to_string(c.compute_type())},
            {"model", options_json(c)}};
  if (!c.source_lang.empty()) j["source_lang"] = c.source_lang;
  if (!c.target_lang.empty()) j["target_lang"] = c.target_lang;
  if (!c.train_corpus.empty()) j["train_corpus"] = c.train_corpus;
  write_file_atomic((fs::path(dir) / "config.json").string(), j.dump(2) + "\n");
}

namespace {

// (major, minor) of "major.minor.patch"; nullopt when it is not a version.
std::optional<std::pair<int, int>> major_minor(const std::string& version) {
  int major = 0, minor = 0;
  char dot = 0;
  std::istringstream in(version);
  if (!(in >> major >> dot >> minor) || dot != '.') return std::nullopt;
  return std::make_pair(major, minor);
}

// A model directory written by a newer attnkit may hold what this one cannot read: refuse it
// plainly rather than fail later on a missing field or a weight's shape.
void check_written_by_older(const std::string& path, const json& config) {
  if (!config.contains("attnkit_version")) return;  // written before the field existed
  const auto& field = config["attnkit_version"];
  const auto theirs = field.is_string() ? major_minor(field.get<std::string>()) : std::nullopt;
  if (!theirs)
    throw Error(path + ": attnkit_version must be a version such as \"" + std::string(kVersion) +
                "\", got " + field.dump());
  if (*theirs > *major_minor(kVersion))
    throw Error(path + ": written by attnkit " + field.get<std::string>() +
                ", newer than this attnkit " + kVersion +
                "; its format may have changed: upgrade attnkit to use this model");
}

}  // namespace

ModelConfig load_config(const std::string& dir) {
  const auto path = (fs::path(dir) / "config.json").string();
  if (!fs::is_directory(dir)) throw Error(dir + ": no such model directory");
  if (!fs::exists(path))
    throw Error(path + ": missing; is " + dir + " a model directory made by attnkit train?");
  const std::string text = read_small_file(path, 1 << 20, "config.json");
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    throw Error(path + ": not valid JSON (" + e.what() + ")");
  }
  check_written_by_older(path, j);
  try {
    ModelConfig c;
    c.dir = dir;
    c.arch = j.contains("arch") ? parse_arch(j.at("arch").get<std::string>()) : Arch::Rnn;
    c.source_tokenizer = j.at("source_tokenizer").get<std::string>();
    c.target_tokenizer = j.at("target_tokenizer").get<std::string>();
    const auto type = j.contains("compute_type")
                          ? kernels::parse_compute_type(j.at("compute_type").get<std::string>())
                          : kernels::ComputeType::Float32;
    for (auto [key, field] :
         {std::pair{"source_lang", &c.source_lang}, std::pair{"target_lang", &c.target_lang},
          std::pair{"train_corpus", &c.train_corpus}})
      if (j.contains(key)) *field = j.at(key).get<std::string>();
    read_options(path, j.at("model"), c);
    c.set_compute_type(type);
    return c;
  } catch (const json::exception& e) {
    throw Error(path + ": malformed config (" + e.what() + ")");
  } catch (const Error& e) {  // an unknown arch or activation: name the file
    const std::string what = e.what();
    if (what.rfind(path, 0) == 0) throw;
    throw Error(path + ": " + what);
  }
}

}  // namespace attnkit::translate
