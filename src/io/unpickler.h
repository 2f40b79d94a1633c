#pragma once

// Private to src/io: a bounds-checked reader for the pickle programs torch.save writes.

#include <ATen/core/Tensor.h>

#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace attnkit::io::detail {

struct PyObject;
using PyRef = std::shared_ptr<PyObject>;

// The Python values torch.save emits, and the intermediate objects (globals, storages) the
// pickle program builds them from.
struct PyObject {
  enum class Kind {
    None,
    Bool,
    Int,
    Float,
    Str,
    Bytes,
    Tuple,
    List,
    Dict,
    Global,
    Storage,
    Tensor
  };
  Kind kind = Kind::None;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::string s;                              // Str, Bytes; Global: "module.name"
  std::vector<PyRef> items;                   // Tuple, List
  std::vector<std::pair<PyRef, PyRef>> dict;  // Dict, in insertion order
  at::Tensor tensor;                          // Storage (flat, 1-D) and Tensor

  PyObject() = default;
  PyObject(const PyObject&) = delete;
  PyObject& operator=(const PyObject&) = delete;
  // Frees nested containers with a work list, not by recursion: a file may nest lists 200,000
  // deep, which a recursive destructor would overflow the stack on.
  ~PyObject();
};

// How deeply containers may nest in a file attnkit reads (torch.save'd state_dicts nest 2 or 3).
constexpr int kMaxPickleDepth = 1000;
// The most a tensor view with more elements than its storage (zero strides: an expanded tensor)
// may take once materialised.
constexpr double kMaxExpandedBytes = 1024.0 * 1024 * 1024;

std::string kind_name(PyObject::Kind kind);

// Returns the storage saved under `key` ("data/<key>" in the archive) as a flat tensor.
using StorageLoader =
    std::function<at::Tensor(const std::string& key, at::ScalarType dtype, int64_t numel)>;

// Runs a pickle program (protocol <= 5 opcodes that torch.save uses). Throws attnkit::Error
// naming `source` and the byte offset on anything malformed or unsupported, including values
// nested deeper than kMaxPickleDepth or containing themselves.
PyRef unpickle(const char* data, size_t size, const std::string& source,
               const StorageLoader& load_storage);

}  // namespace attnkit::io::detail
