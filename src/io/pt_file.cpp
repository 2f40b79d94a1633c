#include "attnkit/io/pt_file.h"

#include <ATen/ATen.h>
#include <caffe2/serialize/inline_container.h>
#include <caffe2/serialize/read_adapter_interface.h>
#include <torch/csrc/jit/serialization/pickle.h>
#include <torch/serialize/output-archive.h>

#include <sys/stat.h>
#include <unistd.h>
#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include "attnkit/core/error.h"
#include "attnkit/core/files.h"
#include "unpickler.h"

namespace attnkit::io {
namespace {

using detail::PyObject;
using detail::PyRef;
using Kind = PyObject::Kind;

// A .pt file: a regular file of at most 16 GiB (a model of the 2^31 weights config.json allows,
// in float64, with room to spare); /dev/zero or a FIFO would never end.
std::string read_file(const std::string& path) {
  return read_small_file(path, size_t(16) << 30, "a .pt file");
}

uint32_t le32(const std::string& b, size_t at) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(b[at + i]);
  return v;
}
uint16_t le16(const std::string& b, size_t at) {
  return static_cast<uint16_t>(static_cast<unsigned char>(b[at]) |
                               static_cast<unsigned char>(b[at + 1]) << 8);
}

uint32_t crc32(const char* data, size_t size) {
  static const auto table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < size; ++i)
    c = table[(c ^ static_cast<unsigned char>(data[i])) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

}  // namespace

void check_archive(const std::string& b, const std::string& name) {
  constexpr size_t kEnd = 22, kEntry = 46, kLocal = 30;
  if (b.size() < kEnd) return;  // the reader reports a truncated archive
  size_t end = b.size() - kEnd;
  const size_t stop = b.size() > kEnd + 65535 ? b.size() - kEnd - 65535 : 0;
  while (end > stop && le32(b, end) != 0x06054b50) --end;
  if (le32(b, end) != 0x06054b50) return;
  auto damaged = [&](const std::string& member, const std::string& what) {
    return Error(name + ": damaged archive: member '" + member + "' " + what);
  };
  size_t at = le32(b, end + 16);
  for (uint32_t n = 0, count = le16(b, end + 10); n < count; ++n) {
    if (at + kEntry > b.size() || le32(b, at) != 0x02014b50) return;
    const uint16_t method = le16(b, at + 10), name_len = le16(b, at + 28);
    const uint32_t crc = le32(b, at + 16);
    const uint64_t packed = le32(b, at + 20), unpacked = le32(b, at + 24), local = le32(b, at + 42);
    if (at + kEntry + name_len > b.size()) return;
    const std::string member = b.substr(at + kEntry, name_len);
    // A compressed member that inflates far beyond its size is a zip bomb (a 0.97 MB file
    // inflated to 2.1 GB before this check). torch.save stores its members uncompressed;
    // LibTorch's own archives compress a few small records, far below the bound.
    if (method != 0 && unpacked > 16 * packed + (1u << 20))
      throw Error(name + ": member '" + member + "' would inflate from " + std::to_string(packed) +
                  " to " + std::to_string(unpacked) +
                  " bytes; refusing it (torch.save stores tensors uncompressed)");
    // A stored member must lie inside the file and match its CRC-32, which the zip readers
    // below do not check: a damaged model.pt crashed LibTorch's TorchScript importer (a SEGV
    // found by tests/fuzz/fuzz_weights). Zip64 sizes (0xFFFFFFFF) are left to the reader.
    const bool zip64 = packed == 0xFFFFFFFFu || local == 0xFFFFFFFFu;
    if (method == 0 && !zip64) {
      if (local + kLocal > b.size() || le32(b, local) != 0x04034b50)
        throw damaged(member, "has no local header where the directory says");
      const uint64_t data = local + kLocal + le16(b, local + 26) + le16(b, local + 28);
      if (data + packed > b.size()) throw damaged(member, "runs past the end of the file");
      if (crc32(b.data() + data, packed) != crc) throw damaged(member, "fails its CRC-32 check");
    }
    at += kEntry + name_len + le16(b, at + 30) + le16(b, at + 32);
  }
}

std::string read_checked_archive(const std::string& path) {
  auto bytes = read_file(path);
  check_archive(bytes, path);
  return bytes;
}

namespace {

// The archive's bytes for LibTorch's zip reader. LibTorch's own MemoryReadAdapter copies from
// any offset it is asked for; a damaged central directory asks for offsets outside the file
// (found by tests/fuzz/fuzz_pt_file: an out-of-bounds read). Here a read past the end is short,
// which the zip reader reports as a damaged archive.
class BoundedReadAdapter : public caffe2::serialize::ReadAdapterInterface {
 public:
  explicit BoundedReadAdapter(const std::string& bytes) : bytes_(bytes) {}
  size_t size() const override { return bytes_.size(); }
  size_t read(uint64_t pos, void* buf, size_t n, const char* /*what*/) const override {
    if (pos >= bytes_.size() || n == 0) return 0;  // n == 0: buf may be null
    n = std::min<uint64_t>(n, bytes_.size() - pos);
    std::memcpy(buf, bytes_.data() + pos, n);
    return n;
  }

 private:
  const std::string& bytes_;
};

PyRef load_object(const std::string& bytes, const std::string& name) {
  if (bytes.size() < 4 || bytes.compare(0, 4, "PK\x03\x04") != 0) {
    const bool legacy = !bytes.empty() && static_cast<unsigned char>(bytes[0]) == 0x80;
    throw Error(name + (legacy ? ": a legacy (pre-1.6) torch.save file; re-save it with "
                                 "torch.save(obj, path) from PyTorch >= 1.6"
                               : ": not a torch.save file (no zip header)"));
  }
  check_archive(bytes, name);
  try {
    auto adapter = std::make_shared<BoundedReadAdapter>(bytes);
    caffe2::serialize::PyTorchStreamReader reader(adapter);
    if (!reader.hasRecord("data.pkl"))
      throw Error(name + ": the archive has no data.pkl record; is it a torch.save file?");
    auto [pickle, pickle_size] = reader.getRecord("data.pkl");
    detail::StorageLoader load_storage = [&](const std::string& key, at::ScalarType dtype,
                                             int64_t numel) {
      const std::string record = "data/" + key;
      if (!reader.hasRecord(record))
        throw Error(name + ": storage '" + record + "' is missing from the archive");
      auto [data, size] = reader.getRecord(record);
      // The count comes from the file: its byte size must not overflow (2^63 - 1 elements).
      const size_t element = at::elementSize(dtype);
      if (static_cast<uint64_t>(numel) > static_cast<uint64_t>(size) / element)
        throw Error(name + ": storage '" + record + "' is declared to hold " +
                    std::to_string(numel) + " " + c10::toString(dtype) +
                    " elements, but its record has only " + std::to_string(size) + " bytes");
      const size_t needed = static_cast<size_t>(numel) * element;
      if (size < needed)
        throw Error(name + ": storage '" + record + "' holds " + std::to_string(size) +
                    " bytes but " + std::to_string(needed) + " are needed (truncated file?)");
      auto storage = at::empty({numel}, at::TensorOptions().dtype(dtype));
      if (needed) std::memcpy(storage.data_ptr(), data.get(), needed);
      return storage;
    };
    return detail::unpickle(static_cast<const char*>(pickle.get()), pickle_size, name,
                            load_storage);
  } catch (const c10::Error& e) {
    throw Error(name + ": not a readable torch.save archive (" +
                first_line(e.what_without_backtrace()) + ")");
  }
}

c10::IValue to_ivalue(const PyRef& o, const std::string& name) {
  switch (o->kind) {
    case Kind::None:
      return c10::IValue();
    case Kind::Bool:
      return c10::IValue(o->b);
    case Kind::Int:
      return c10::IValue(o->i);
    case Kind::Float:
      return c10::IValue(o->f);
    case Kind::Str:
    case Kind::Bytes:
      return c10::IValue(o->s);
    case Kind::Tensor:
      return c10::IValue(o->tensor);
    case Kind::Tuple: {
      std::vector<c10::IValue> items;
      for (const auto& item : o->items) items.push_back(to_ivalue(item, name));
      return c10::ivalue::Tuple::create(std::move(items));
    }
    case Kind::List: {
      c10::impl::GenericList list(c10::AnyType::get());
      for (const auto& item : o->items) list.push_back(to_ivalue(item, name));
      return list;
    }
    case Kind::Dict: {
      c10::impl::GenericDict dict(c10::AnyType::get(), c10::AnyType::get());
      for (const auto& [k, v] : o->dict)
        dict.insert_or_assign(to_ivalue(k, name), to_ivalue(v, name));
      return dict;
    }
    case Kind::Global:
    case Kind::Storage:
      break;
  }
  throw Error(name + ": holds " + detail::kind_name(o->kind) + ", which attnkit cannot represent");
}

}  // namespace

c10::IValue load_bytes(const std::string& bytes, const std::string& name) {
  return to_ivalue(load_object(bytes, name), name);
}

c10::IValue load(const std::string& path) { return load_bytes(read_file(path), path); }

at::Tensor load_tensor(const std::string& path) {
  auto o = load_object(read_file(path), path);
  if (o->kind != Kind::Tensor)
    throw Error(path + ": expected a tensor (torch.save(tensor, path)) but the file holds a " +
                detail::kind_name(o->kind));
  return o->tensor;
}

TensorDict load_tensor_dict(const std::string& path) {
  return load_tensor_dict_bytes(read_file(path), path);
}

TensorDict load_tensor_dict_bytes(const std::string& bytes, const std::string& path) {
  auto o = load_object(bytes, path);
  if (o->kind != Kind::Dict)
    throw Error(path + ": expected a dict of tensors (e.g. a state_dict) but the file holds a " +
                detail::kind_name(o->kind));
  TensorDict out;
  for (const auto& [k, v] : o->dict) {
    if (k->kind != Kind::Str)
      throw Error(path + ": a key is a " + detail::kind_name(k->kind) + ", not a string");
    if (v->kind != Kind::Tensor)
      throw Error(path + ": key '" + k->s + "' holds a " + detail::kind_name(v->kind) +
                  ", not a tensor");
    out.emplace_back(k->s, v->tensor);
  }
  return out;
}

void save_tensor_dict(const std::string& path, const TensorDict& tensors) {
  c10::Dict<std::string, at::Tensor> dict;
  std::set<std::string> seen;
  for (const auto& [key, tensor] : tensors) {
    if (!seen.insert(key).second) throw Error(path + ": duplicate key '" + key + "'");
    dict.insert(key, tensor.detach().cpu().contiguous());
  }
  const auto bytes = torch::jit::pickle_save(dict);
  write_file_atomic(path, std::string(bytes.begin(), bytes.end()));
}

const at::Tensor& find(const TensorDict& dict, const std::string& key, const std::string& what) {
  for (const auto& [k, t] : dict)
    if (k == key) return t;
  throw Error(what + ": no tensor named '" + key + "'");
}

}  // namespace attnkit::io
