#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>

#include <string>
#include <utility>
#include <vector>

// Reading and writing the files of Python's torch.save / torch.load (the zip format, default
// since PyTorch 1.6). LibTorch 1.13's pickle_load cannot read a state_dict (it rejects
// collections.OrderedDict), so attnkit has its own bounds-checked unpickler for the subset
// torch.save emits: tensors (any dtype, views sharing a storage), dicts and OrderedDicts,
// lists, tuples, strings, numbers, booleans and None. Anything else is an attnkit::Error that
// names the file and the offending Python object; a corrupt or truncated file is an error too,
// never a crash.
namespace attnkit::io {

// An ordered name -> tensor map, as in a PyTorch state_dict.
using TensorDict = std::vector<std::pair<std::string, at::Tensor>>;

// The whole object saved in `path`. Dicts become GenericDicts (insertion order kept), tuples
// Tuples, lists GenericLists.
c10::IValue load(const std::string& path);
// Same, from the bytes of a file; `name` is used in error messages.
c10::IValue load_bytes(const std::string& bytes, const std::string& name);

// A file holding one tensor (torch.save(tensor, path)).
at::Tensor load_tensor(const std::string& path);
// A file holding a dict of tensors (a state_dict, or torch.save({"a": t, ...})). Non-tensor
// values (e.g. numbers) are an error naming the key.
TensorDict load_tensor_dict(const std::string& path);
TensorDict load_tensor_dict_bytes(const std::string& bytes, const std::string& name);

// Writes `tensors` as a dict that Python's torch.load reads. The file appears atomically:
// it is written to a temporary file next to `path` and renamed, so a failure never leaves a
// half-written file or destroys an existing one.
void save_tensor_dict(const std::string& path, const TensorDict& tensors);

// The zip container of a .pt file (torch.save's, or a LibTorch archive's: model.pt,
// checkpoint.pt), checked before a reader trusts it: every stored member inside the file and
// matching its CRC-32, no compressed member inflating beyond 16x. attnkit::Error naming `name`
// and the member.
void check_archive(const std::string& bytes, const std::string& name);
// The bytes of the archive at `path`, checked so.
std::string read_checked_archive(const std::string& path);

// Looks a name up in a TensorDict; throws attnkit::Error naming `what` when absent.
const at::Tensor& find(const TensorDict& dict, const std::string& key, const std::string& what);

}  // namespace attnkit::io
