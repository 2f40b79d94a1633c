// A model directory's weights: model.pt and checkpoint.pt, torch.save dicts read by attnkit's
// unpickler, then held to config.json's tensors (names, shapes, dtypes) and to finite values. The
// input is config.json and the weights joined by "\n@@@@\n" (seeds: a 4-wide model that
// make_seeds.py trains for a step).

#include <filesystem>

#include "attnkit/core/error.h"
#include "attnkit/io/weights.h"
#include "attnkit/train/checkpoint.h"
#include "attnkit/translate/model_dir.h"
#include "fuzz_input.h"

ATTNKIT_FUZZ_TARGET(weights) {
  using namespace attnkit;
  const auto parts = fuzz::split(data, size, "\n@@@@\n", 2);
  if (parts.size() < 2) return 0;
  fuzz::write_file("weights/config.json", parts[0]);
  const std::string path = fuzz::write_file("weights/model.pt", parts[1]);
  translate::ModelConfig config;
  try {
    config = translate::load_config((fuzz::scratch_dir() / "weights").string());
  } catch (const Error&) {
    return 0;
  }
  rnn::RnnModel model(config.model);
  try {
    io::load_weights(*model, path);
  } catch (const Error&) {
  }
  try {
    train::load_checkpoint_weights(*model, path);
  } catch (const Error&) {
  }
  return 0;
}
