#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace torch::nn {
class Module;
}  // namespace torch::nn

// A model directory's weights, whatever the architecture: a module's parameters and buffers.
namespace attnkit::io {

// model.pt. Loading checks every tensor's name and shape against the module's and throws
// attnkit::Error naming the file and the first that differs.
void save_weights(torch::nn::Module& model, const std::string& path);
void load_weights(torch::nn::Module& model, const std::string& path);
// An int8 directory's model.pt: a torch.save dict of the module's parameters and buffers, each
// float matrix (the linear layers', the GRUs' and the embeddings' weights) as its int8 rows under
// its own name and their scales under NAME_scale (kernels/quantize.h), the rest as it is. Loading
// gives the module the matrices the int8 rows stand for.
void save_quantized_weights(torch::nn::Module& model, const std::string& path);
void load_quantized_weights(torch::nn::Module& model, const std::string& path);

// Every parameter's name and shape, and the check after a load that each kept the shape it had
// (LibTorch's loader replaces a tensor of another shape silently) and holds finite numbers:
// attnkit::Error naming `path` and the first that differs.
using Shapes = std::vector<std::pair<std::string, std::vector<int64_t>>>;
Shapes shapes_of(torch::nn::Module& model);
void check_loaded(torch::nn::Module& model, const std::string& path, const Shapes& expected);

}  // namespace attnkit::io
