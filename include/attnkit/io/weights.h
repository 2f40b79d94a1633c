#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "attnkit/io/pt_file.h"

namespace torch::nn {
class Module;
}  // namespace torch::nn

// A model directory's weights, whatever the architecture: a module's parameters and buffers.
namespace attnkit::io {

// model.pt: a torch.save dict of the module's parameters and buffers (Python's torch.load reads
// it), read back by attnkit's own unpickler (io/pt_file.h), which builds tensors and nothing
// else. Loading checks every tensor's name, shape and dtype against the module's and throws
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

// The bytes of a weights file (model.pt, checkpoint.pt) for attnkit's own unpickler: sizes and
// CRCs checked, and a LibTorch (TorchScript) archive refused by name, since reading one runs the
// code it carries.
std::string read_weights_file(const std::string& path);
// `state` into the module's parameters and buffers: each one present, of its shape and dtype, and
// nothing left over (weights with more layers than the config). attnkit::Error naming `path`
// and the tensor otherwise.
void assign(torch::nn::Module& model, const TensorDict& state, const std::string& path);

}  // namespace attnkit::io
