#include "unpickler.h"

#include <ATen/ATen.h>

#include <cstring>
#include <exception>
#include <map>
#include <unordered_map>
#include <unordered_set>

#include "attnkit/core/error.h"

namespace attnkit::io::detail {
namespace {

using Kind = PyObject::Kind;

PyRef make(Kind kind) {
  auto o = std::make_shared<PyObject>();
  o->kind = kind;
  return o;
}

const std::map<std::string, at::ScalarType>& storage_types() {
  static const std::map<std::string, at::ScalarType> types = {
      {"torch.FloatStorage", at::kFloat},
      {"torch.DoubleStorage", at::kDouble},
      {"torch.HalfStorage", at::kHalf},
      {"torch.BFloat16Storage", at::kBFloat16},
      {"torch.LongStorage", at::kLong},
      {"torch.IntStorage", at::kInt},
      {"torch.ShortStorage", at::kShort},
      {"torch.CharStorage", at::kChar},
      {"torch.ByteStorage", at::kByte},
      {"torch.BoolStorage", at::kBool},
      {"torch.ComplexFloatStorage", at::kComplexFloat},
      {"torch.ComplexDoubleStorage", at::kComplexDouble}};
  return types;
}

// The pickle opcodes the reader takes, named as Python's pickletools names them.
namespace opcode {
enum : unsigned char {
  PROTO = 0x80,
  FRAME = 0x95,
  MARK = '(',
  EMPTY_DICT = '}',
  EMPTY_LIST = ']',
  EMPTY_TUPLE = ')',
  NONE = 'N',
  NEWTRUE = 0x88,
  NEWFALSE = 0x89,
  BININT1 = 'K',
  BININT2 = 'M',
  BININT = 'J',
  LONG1 = 0x8a,
  BINFLOAT = 'G',
  BINUNICODE = 'X',
  SHORT_BINUNICODE = 0x8c,
  BINUNICODE8 = 0x8d,
  BINSTRING = 'T',
  SHORT_BINSTRING = 'U',
  BINBYTES = 'B',
  SHORT_BINBYTES = 'C',
  BINPUT = 'q',
  LONG_BINPUT = 'r',
  MEMOIZE = 0x94,
  BINGET = 'h',
  LONG_BINGET = 'j',
  GLOBAL = 'c',
  STACK_GLOBAL = 0x93,
  TUPLE = 't',
  TUPLE1 = 0x85,
  TUPLE2 = 0x86,
  TUPLE3 = 0x87,
  LIST = 'l',
  DICT = 'd',
  APPEND = 'a',
  APPENDS = 'e',
  SETITEM = 's',
  SETITEMS = 'u',
  REDUCE = 'R',
  BUILD = 'b',
  BINPERSID = 'Q',
  POP = '0',
  POP_MARK = '1',
  DUP = '2',
};
}  // namespace opcode

class Unpickler {
 public:
  Unpickler(const char* data, size_t size, std::string source, const StorageLoader& loader)
      : data_(reinterpret_cast<const unsigned char*>(data)),
        size_(size),
        source_(std::move(source)),
        loader_(loader) {}

  // What the program built besides its result may contain itself (a memoized list appended to
  // itself, or anything left when the program fails): those cycles are broken here, or they
  // would leak (make test-sanitize found it).
  ~Unpickler() { break_cycles(); }

  PyRef run() {
    while (true) {
      op_pos_ = pos_;
      const unsigned char op = u8();
      if (op == '.') break;  // STOP
      step(op);
    }
    if (stack_.size() != 1)
      fail("the program ended with " + std::to_string(stack_.size()) +
           " values on the stack instead of 1");
    check_nesting(stack_.back());
    result_ = stack_.back();
    return result_;
  }

 private:
  // The value's containers nest at most kMaxPickleDepth deep and never contain themselves, so
  // that the recursive conversions after reading are safe. A depth-first walk with an explicit
  // stack; a shared container is walked once.
  void check_nesting(const PyRef& root) const {
    std::unordered_map<const PyObject*, bool> done;  // false: on the current path
    std::vector<std::pair<const PyObject*, size_t>> path = {{root.get(), 0}};
    done[root.get()] = false;
    auto children = [](const PyObject* o) {
      std::vector<const PyObject*> out;
      for (const auto& i : o->items) out.push_back(i.get());
      for (const auto& [k, v] : o->dict) out.insert(out.end(), {k.get(), v.get()});
      return out;
    };
    while (!path.empty()) {
      auto& [node, next] = path.back();
      const auto kids = children(node);
      if (next == kids.size()) {
        done[node] = true;
        path.pop_back();
        continue;
      }
      const PyObject* child = kids[next++];
      auto it = done.find(child);
      if (it != done.end()) {
        if (!it->second) fail("a container contains itself");
        continue;
      }
      if (path.size() >= static_cast<size_t>(kMaxPickleDepth))
        fail("values nested deeper than " + std::to_string(kMaxPickleDepth) + " levels");
      done[child] = false;
      path.emplace_back(child, 0);
    }
  }

  // Every object reachable from `roots`, each once.
  static std::vector<PyRef> reachable(std::vector<PyRef> all) {
    std::unordered_set<const PyObject*> seen;
    std::vector<PyRef> out;
    while (!all.empty()) {
      PyRef o = std::move(all.back());
      all.pop_back();
      if (!o || !seen.insert(o.get()).second) continue;
      for (const auto& item : o->items) all.push_back(item);
      for (const auto& [k, v] : o->dict) all.insert(all.end(), {k, v});
      out.push_back(std::move(o));
    }
    return out;
  }

  // Empties every container the stack and the memo reach, except the result's (acyclic: checked
  // by check_nesting), keeping each alive until all are emptied.
  void break_cycles() {
    std::unordered_set<const PyObject*> result;
    for (const auto& o : reachable({result_})) result.insert(o.get());
    std::vector<PyRef> roots(stack_.begin(), stack_.end());
    for (const auto& [index, o] : memo_) roots.push_back(o);
    for (const auto& o : reachable(std::move(roots))) {
      if (result.count(o.get())) continue;
      o->items.clear();
      o->dict.clear();
    }
  }

  [[noreturn]] void fail(const std::string& what) const {
    throw Error(source_ + ": corrupt or unsupported pickle at byte " + std::to_string(op_pos_) +
                ": " + what);
  }

  void need(size_t n) {
    if (n > size_ - pos_) fail("truncated (needs " + std::to_string(n) + " more bytes)");
  }
  unsigned char u8() {
    need(1);
    return data_[pos_++];
  }
  uint64_t le(size_t n) {
    need(n);
    uint64_t v = 0;
    for (size_t i = 0; i < n; ++i) v |= static_cast<uint64_t>(data_[pos_ + i]) << (8 * i);
    pos_ += n;
    return v;
  }
  std::string take(uint64_t n) {
    if (n > size_) fail("a length of " + std::to_string(n) + " bytes exceeds the file");
    need(static_cast<size_t>(n));
    std::string s(reinterpret_cast<const char*>(data_ + pos_), static_cast<size_t>(n));
    pos_ += static_cast<size_t>(n);
    return s;
  }
  std::string line() {
    std::string s;
    while (true) {
      const unsigned char c = u8();
      if (c == '\n') return s;
      s.push_back(static_cast<char>(c));
    }
  }

  void push(PyRef o) { stack_.push_back(std::move(o)); }
  PyRef pop() {
    if (stack_.size() <= floor()) fail("pop from an empty stack");
    auto o = stack_.back();
    stack_.pop_back();
    return o;
  }
  PyRef& top() {
    if (stack_.size() <= floor()) fail("the stack is empty");
    return stack_.back();
  }
  size_t floor() const { return marks_.empty() ? 0 : marks_.back(); }
  std::vector<PyRef> pop_mark() {
    if (marks_.empty()) fail("no MARK to pop to");
    const size_t m = marks_.back();
    marks_.pop_back();
    std::vector<PyRef> items(stack_.begin() + static_cast<std::ptrdiff_t>(m), stack_.end());
    stack_.resize(m);
    return items;
  }
  void memo_put(uint64_t index) {
    if (stack_.empty()) fail("memoize with an empty stack");
    memo_[index] = stack_.back();
  }
  PyRef memo_get(uint64_t index) {
    auto it = memo_.find(index);
    if (it == memo_.end()) fail("memo entry " + std::to_string(index) + " is not defined");
    return it->second;
  }

  PyRef tuple_of(std::vector<PyRef> items) {
    auto t = make(Kind::Tuple);
    t->items = std::move(items);
    return t;
  }
  PyRef str(std::string s, Kind kind = Kind::Str) {
    auto o = make(kind);
    o->s = std::move(s);
    return o;
  }
  PyRef integer(int64_t v) {
    auto o = make(Kind::Int);
    o->i = v;
    return o;
  }

  Kind expect(const PyRef& o, Kind kind, const char* what) {
    if (o->kind != kind)
      fail(std::string(what) + " should be " + kind_name(kind) + ", got " + kind_name(o->kind));
    return kind;
  }

  void set_items(const PyRef& target, const std::vector<PyRef>& kv) {
    expect(target, Kind::Dict, "SETITEMS target");
    if (kv.size() % 2) fail("SETITEMS with an odd number of values");
    for (size_t i = 0; i < kv.size(); i += 2) {
      bool replaced = false;
      for (auto& entry : target->dict) {
        if (entry.first->kind == kv[i]->kind && entry.first->kind == Kind::Str &&
            entry.first->s == kv[i]->s) {
          entry.second = kv[i + 1];
          replaced = true;
        }
      }
      if (!replaced) target->dict.emplace_back(kv[i], kv[i + 1]);
    }
  }

  std::vector<int64_t> int_tuple(const PyRef& o, const char* what) {
    if (o->kind != Kind::Tuple && o->kind != Kind::List)
      fail(std::string(what) + " is not a tuple");
    std::vector<int64_t> v;
    for (const auto& item : o->items) {
      expect(item, Kind::Int, what);
      v.push_back(item->i);
    }
    return v;
  }

  PyRef rebuild_tensor(const std::vector<PyRef>& args) {
    if (args.size() < 4) fail("_rebuild_tensor needs at least 4 arguments");
    expect(args[0], Kind::Storage, "the tensor's storage");
    expect(args[1], Kind::Int, "the storage offset");
    const auto& storage = args[0]->tensor;
    const int64_t offset = args[1]->i;
    auto sizes = int_tuple(args[2], "the tensor's size");
    auto strides = int_tuple(args[3], "the tensor's stride");
    if (sizes.size() != strides.size()) fail("size and stride have different lengths");
    // A corrupt file must not let a view reach outside its storage.
    bool empty = false;
    int64_t last = offset;
    for (size_t d = 0; d < sizes.size(); ++d) {
      if (sizes[d] < 0 || strides[d] < 0) fail("negative size or stride");
      if (sizes[d] == 0)
        empty = true;
      else if (strides[d] > 0 && sizes[d] - 1 > (INT64_MAX - last) / strides[d])
        fail("size and stride overflow");
      else
        last += (sizes[d] - 1) * strides[d];
    }
    if (offset < 0 || (!empty && last >= storage.numel()))
      fail("a tensor view reaches element " + std::to_string(last) + " of a storage of " +
           std::to_string(storage.numel()) + " elements");
    // A view with zero strides can hold far more elements than its storage (48 bytes grew to
    // 7 GB once made contiguous): more than the storage and over kMaxExpandedBytes is refused.
    int64_t numel = 1;
    for (int64_t size : sizes)
      numel = size != 0 && numel > INT64_MAX / size ? INT64_MAX : numel * size;
    const double bytes = static_cast<double>(numel) * storage.element_size();
    if (!empty && numel > storage.numel() && bytes > kMaxExpandedBytes)
      fail("a tensor view of " + std::to_string(numel) + " elements over a storage of " +
           std::to_string(storage.numel()) + " would take " +
           std::to_string(static_cast<int64_t>(bytes / (1 << 20))) + " MiB; the limit is " +
           std::to_string(static_cast<int64_t>(kMaxExpandedBytes / (1 << 20))) + " MiB");
    auto o = make(Kind::Tensor);
    o->tensor = storage.as_strided(sizes, strides, offset);
    return o;
  }

  PyRef call(const PyRef& callable, const PyRef& args) {
    expect(callable, Kind::Global, "REDUCE's callable");
    expect(args, Kind::Tuple, "REDUCE's arguments");
    const std::string& name = callable->s;
    if (name == "collections.OrderedDict") {
      if (!args->items.empty()) fail("OrderedDict with constructor arguments");
      return make(Kind::Dict);
    }
    if (name == "torch._utils._rebuild_tensor_v2" || name == "torch._utils._rebuild_tensor")
      return rebuild_tensor(args->items);
    if (name == "torch._utils._rebuild_parameter" ||
        name == "torch._utils._rebuild_parameter_with_state") {
      if (args->items.empty()) fail("_rebuild_parameter without arguments");
      expect(args->items[0], Kind::Tensor, "a parameter's data");
      return args->items[0];
    }
    // LibTorch's own pickler (torch::pickle_save) tags containers with their static type.
    if (name == "torch.jit._pickle.restore_type_tag") {
      if (args->items.empty()) fail("restore_type_tag without arguments");
      return args->items[0];
    }
    if (name == "torch.jit._pickle.build_intlist" || name == "torch.jit._pickle.build_floatlist" ||
        name == "torch.jit._pickle.build_boollist" ||
        name == "torch.jit._pickle.build_tensorlist") {
      if (args->items.size() != 1) fail(name + " needs one argument");
      auto list = make(Kind::List);
      list->items = args->items[0]->items;
      return list;
    }
    fail("unsupported Python object '" + name +
         "' (attnkit reads tensors, dicts, OrderedDicts, lists, tuples, strings and numbers)");
  }

  PyRef persistent_load(const PyRef& pid) {
    expect(pid, Kind::Tuple, "a persistent id");
    const auto& t = pid->items;
    if (t.size() != 5 || t[0]->kind != Kind::Str || t[0]->s != "storage")
      fail("unsupported persistent id (expected ('storage', type, key, location, numel))");
    expect(t[1], Kind::Global, "the storage type");
    expect(t[2], Kind::Str, "the storage key");
    expect(t[4], Kind::Int, "the storage size");
    auto type = storage_types().find(t[1]->s);
    if (type == storage_types().end()) fail("unsupported storage type '" + t[1]->s + "'");
    if (t[4]->i < 0) fail("negative storage size");
    auto cached = storages_.find(t[2]->s);
    if (cached != storages_.end()) return cached->second;
    auto o = make(Kind::Storage);
    o->tensor = loader_(t[2]->s, type->second, t[4]->i);
    storages_[t[2]->s] = o;
    return o;
  }

  void step(unsigned char code) {
    switch (code) {
      case opcode::PROTO:
        u8();
        break;
      case opcode::FRAME:
        le(8);
        break;  // a length hint only
      case opcode::MARK:
        marks_.push_back(stack_.size());
        break;
      case opcode::EMPTY_DICT:
        push(make(Kind::Dict));
        break;
      case opcode::EMPTY_LIST:
        push(make(Kind::List));
        break;
      case opcode::EMPTY_TUPLE:
        push(make(Kind::Tuple));
        break;
      case opcode::NONE:
        push(make(Kind::None));
        break;
      case opcode::NEWTRUE:
      case opcode::NEWFALSE: {
        auto o = make(Kind::Bool);
        o->b = code == opcode::NEWTRUE;
        push(o);
        break;
      }
      case opcode::BININT1:
        push(integer(le(1)));
        break;
      case opcode::BININT2:
        push(integer(le(2)));
        break;
      case opcode::BININT:
        push(integer(static_cast<int32_t>(le(4))));
        break;
      case opcode::LONG1: {
        const size_t n = u8();
        if (n > 8) fail("integer wider than 64 bits");
        uint64_t v = le(n);
        if (n > 0 && n < 8 && (v >> (8 * n - 1)) & 1) v |= ~uint64_t{0} << (8 * n);
        push(integer(static_cast<int64_t>(v)));
        break;
      }
      case opcode::BINFLOAT: {  // big-endian
        need(8);
        uint64_t bits = 0;
        for (int i = 0; i < 8; ++i) bits = (bits << 8) | data_[pos_ + i];
        pos_ += 8;
        auto o = make(Kind::Float);
        std::memcpy(&o->f, &bits, 8);
        push(o);
        break;
      }
      case opcode::BINUNICODE:
        push(str(take(le(4))));
        break;
      case opcode::SHORT_BINUNICODE:
        push(str(take(u8())));
        break;
      case opcode::BINUNICODE8:
        push(str(take(le(8))));
        break;
      case opcode::BINSTRING:
        push(str(take(le(4)), Kind::Bytes));
        break;
      case opcode::SHORT_BINSTRING:
        push(str(take(u8()), Kind::Bytes));
        break;
      case opcode::BINBYTES:
        push(str(take(le(4)), Kind::Bytes));
        break;
      case opcode::SHORT_BINBYTES:
        push(str(take(u8()), Kind::Bytes));
        break;
      case opcode::BINPUT:
        memo_put(u8());
        break;
      case opcode::LONG_BINPUT:
        memo_put(le(4));
        break;
      case opcode::MEMOIZE:
        memo_put(memo_.size());
        break;
      case opcode::BINGET:
        push(memo_get(u8()));
        break;
      case opcode::LONG_BINGET:
        push(memo_get(le(4)));
        break;
      case opcode::GLOBAL: {
        auto module = line();
        auto name = line();
        push(str(module + "." + name, Kind::Global));
        break;
      }
      case opcode::STACK_GLOBAL: {
        auto name = pop(), module = pop();
        expect(name, Kind::Str, "STACK_GLOBAL's name");
        expect(module, Kind::Str, "STACK_GLOBAL's module");
        push(str(module->s + "." + name->s, Kind::Global));
        break;
      }
      case opcode::TUPLE:
        push(tuple_of(pop_mark()));
        break;
      case opcode::TUPLE1:
      case opcode::TUPLE2:
      case opcode::TUPLE3: {
        const size_t n = code - opcode::TUPLE1 + 1u;
        std::vector<PyRef> items(n);
        for (size_t i = n; i-- > 0;) items[i] = pop();
        push(tuple_of(std::move(items)));
        break;
      }
      case opcode::LIST: {
        auto l = make(Kind::List);
        l->items = pop_mark();
        push(l);
        break;
      }
      case opcode::DICT: {
        auto d = make(Kind::Dict);
        set_items(d, pop_mark());
        push(d);
        break;
      }
      case opcode::APPEND: {
        auto item = pop();
        expect(top(), Kind::List, "APPEND's target");
        top()->items.push_back(item);
        break;
      }
      case opcode::APPENDS: {
        auto items = pop_mark();
        expect(top(), Kind::List, "APPENDS's target");
        for (auto& it : items) top()->items.push_back(it);
        break;
      }
      case opcode::SETITEM: {
        auto value = pop(), key = pop();
        set_items(top(), {key, value});
        break;
      }
      case opcode::SETITEMS: {
        auto kv = pop_mark();
        set_items(top(), kv);
        break;
      }
      case opcode::REDUCE: {
        auto args = pop(), callable = pop();
        push(call(callable, args));
        break;
      }
      case opcode::BUILD: {  // the state of an OrderedDict (its _metadata) or a tensor; not needed
        pop();
        const Kind k = top()->kind;
        if (k != Kind::Dict && k != Kind::Tensor) fail("BUILD on a " + kind_name(k));
        break;
      }
      case opcode::BINPERSID:
        push(persistent_load(pop()));
        break;
      case opcode::POP:
        pop();
        break;
      case opcode::POP_MARK:
        pop_mark();
        break;
      case opcode::DUP:
        push(top());
        break;
      default: {
        char hex[8];
        std::snprintf(hex, sizeof hex, "0x%02x", code);
        fail(std::string("unsupported opcode ") + hex);
      }
    }
  }

  const unsigned char* data_;
  size_t size_;
  size_t pos_ = 0, op_pos_ = 0;
  std::string source_;
  const StorageLoader& loader_;
  std::vector<PyRef> stack_;
  std::vector<size_t> marks_;
  std::unordered_map<uint64_t, PyRef> memo_;
  std::unordered_map<std::string, PyRef> storages_;
  PyRef result_;
};

}  // namespace

PyObject::~PyObject() {
  // Children this object holds the last reference to are emptied before they are released, so
  // each destructor below runs on an empty container.
  std::vector<PyRef> pending;
  auto take = [&pending](PyObject& o) {
    for (auto& i : o.items) pending.push_back(std::move(i));
    for (auto& [k, v] : o.dict) {
      pending.push_back(std::move(k));
      pending.push_back(std::move(v));
    }
    o.items.clear();
    o.dict.clear();
  };
  take(*this);
  while (!pending.empty()) {
    PyRef o = std::move(pending.back());
    pending.pop_back();
    if (o && o.use_count() == 1) take(*o);
  }
}

std::string kind_name(Kind kind) {
  switch (kind) {
    case Kind::None:
      return "None";
    case Kind::Bool:
      return "bool";
    case Kind::Int:
      return "int";
    case Kind::Float:
      return "float";
    case Kind::Str:
      return "str";
    case Kind::Bytes:
      return "bytes";
    case Kind::Tuple:
      return "tuple";
    case Kind::List:
      return "list";
    case Kind::Dict:
      return "dict";
    case Kind::Global:
      return "a Python class or function";
    case Kind::Storage:
      return "a storage";
    case Kind::Tensor:
      return "tensor";
  }
  return "?";
}

PyRef unpickle(const char* data, size_t size, const std::string& source,
               const StorageLoader& load_storage) {
  return Unpickler(data, size, source, load_storage).run();
}

}  // namespace attnkit::io::detail
