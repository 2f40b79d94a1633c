// `attnkit export`: a model directory's weights as a torch.save dict, for PyTorch.

#include <filesystem>
#include <iostream>
#include <memory>

#include "attnkit/io/pt_file.h"
#include "attnkit/io/state_dict.h"
#include "attnkit/io/weights.h"
#include "attnkit/train/checkpoint.h"
#include "attnkit/translate/translator.h"
#include "commands.h"

namespace attnkit::cli {

Command add_export_command(CLI::App& parent) {
  auto* app = parent.add_subcommand("export", "Write a model's weights for Python's torch.load");
  auto model = std::make_shared<std::string>(), out = std::make_shared<std::string>();
  app->add_option("--model", *model, "Model directory")->required();
  app->add_option("--out", *out, "Output .pt file: {parameter name: tensor}")->required();
  auto latest = std::make_shared<bool>(false);
  auto weights_file = std::make_shared<std::string>();
  auto* from_checkpoint = app->add_flag(
      "--from-checkpoint", *latest, "The latest weights (checkpoint.pt), not the best (model.pt)");
  app->add_option("--weights", *weights_file,
                  "Another weight file of this model instead of model.pt (a kept checkpoint)")
      ->check(CLI::ExistingFile)
      ->excludes(from_checkpoint);
  return {app, [model, out, latest, weights_file] {
            translate::Translator translator(*model);
            if (*latest)
              train::load_checkpoint_weights(
                  translator.module(), (std::filesystem::path(*model) / "checkpoint.pt").string());
            if (!weights_file->empty()) io::load_weights(translator.module(), *weights_file);
            const auto weights = io::state_dict(translator.module());
            io::save_tensor_dict(*out, weights);
            std::cout << "wrote " << weights.size() << " tensors to " << *out << "\n";
            return 0;
          }};
}

}  // namespace attnkit::cli
