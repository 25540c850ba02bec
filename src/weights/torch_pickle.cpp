#include "src/weights/torch_pickle.h"

#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <unordered_map>
#include <utility>

#include "src/base/clip_text.h"
#include "src/base/error.h"

namespace wm::io {
namespace {

// `what` may quote the file (zip entry names, storage types): one printable line.
[[noreturn]] void bad(const std::string& path, const std::string& what) {
  throw ModelError(path + ": " + wm::one_line(what));
}

// --- zip (stored entries only) ---------------------------------------------------------------

uint64_t le(const unsigned char* p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

struct ZipEntry {
  size_t offset = 0;  // of the data in the file
  size_t size = 0;
  int method = 0;  // 0: stored; anything else cannot be read in place
};

// The entries of a zip held in [data, data + size): name → where its (uncompressed) data lie.
std::map<std::string, ZipEntry> read_zip(const std::string& path, const unsigned char* data,
                                         size_t size) {
  const std::string not_zip =
      "not a PyTorch checkpoint (torch.save zip format): no zip end record (truncated, or "
      "another format; legacy pre-1.6 .pth files are not read)";
  if (size < 22) bad(path, not_zip);
  // The end-of-central-directory record: the last 22 bytes plus a comment of up to 64 KiB.
  size_t eocd = std::string::npos;
  const size_t lowest = size > 22 + 65535 ? size - 22 - 65535 : 0;
  for (size_t at = size - 22;; --at) {
    if (le(data + at, 4) == 0x06054b50 && at + 22 + le(data + at + 20, 2) == size) {
      eocd = at;
      break;
    }
    if (at == lowest) break;
  }
  if (eocd == std::string::npos) bad(path, not_zip);
  uint64_t entries = le(data + eocd + 10, 2);
  uint64_t dir_size = le(data + eocd + 12, 4);
  uint64_t dir_offset = le(data + eocd + 16, 4);
  if (eocd >= 20 && le(data + eocd - 20, 4) == 0x07064b50) {  // zip64 locator
    const uint64_t at = le(data + eocd - 20 + 8, 8);
    if (at > size || size - at < 56 || le(data + at, 4) != 0x06064b50) {
      bad(path, "malformed zip: bad zip64 end record");
    }
    entries = le(data + at + 32, 8);
    dir_size = le(data + at + 40, 8);
    dir_offset = le(data + at + 48, 8);
  }
  if (dir_offset > size || dir_size > size - dir_offset) {
    bad(path, "malformed zip: central directory outside the file (truncated?)");
  }
  std::map<std::string, ZipEntry> out;
  size_t at = dir_offset;
  const size_t end = dir_offset + dir_size;
  for (uint64_t i = 0; i < entries; ++i) {
    if (end - at < 46 || le(data + at, 4) != 0x02014b50) {
      bad(path, "malformed zip: bad central directory entry");
    }
    const unsigned char* h = data + at;
    const uint64_t flags = le(h + 8, 2), method = le(h + 10, 2);
    uint64_t csize = le(h + 20, 4), usize = le(h + 24, 4), local = le(h + 42, 4);
    const size_t name_len = le(h + 28, 2), extra_len = le(h + 30, 2), comment_len = le(h + 32, 2);
    if (end - at - 46 < name_len + extra_len + comment_len) {
      bad(path, "malformed zip: central directory entry runs past its end");
    }
    const std::string name(reinterpret_cast<const char*>(h + 46), name_len);
    // zip64 sizes and offset, present for the fields that are 0xFFFFFFFF.
    for (size_t e = 0; e + 4 <= extra_len;) {
      const unsigned char* x = h + 46 + name_len + e;
      const size_t id = le(x, 2), len = le(x + 2, 2);
      if (e + 4 + len > extra_len) break;
      if (id == 1) {
        size_t k = 4;
        auto take = [&](uint64_t& field) {
          if (field != 0xFFFFFFFFu) return;
          if (k + 8 > 4 + len) bad(path, "malformed zip: short zip64 field of " + clip(name));
          field = le(x + k, 8);
          k += 8;
        };
        take(usize);
        take(csize);
        take(local);
      }
      e += 4 + len;
    }
    if (flags & 1) bad(path, "zip entry '" + clip(name) + "' is encrypted");
    if (method == 0 && csize != usize) {
      bad(path, "malformed zip: stored entry '" + clip(name) + "' has two sizes");
    }
    if (local > size || size - local < 30 || le(data + local, 4) != 0x04034b50) {
      bad(path, "malformed zip: bad local header of '" + clip(name) + "' (truncated?)");
    }
    const uint64_t start = local + 30 + le(data + local + 26, 2) + le(data + local + 28, 2);
    if (start > size || csize > size - start) {
      bad(path, "zip entry '" + clip(name) + "' runs past the end of the file (truncated?)");
    }
    out[name] = {size_t(start), size_t(csize), int(method)};
    at += 46 + name_len + extra_len + comment_len;
  }
  return out;
}

// The bytes of an entry that is read: it must be stored, as torch.save writes them.
const ZipEntry& stored(const std::string& path, const std::map<std::string, ZipEntry>& zip,
                       const std::string& name) {
  const ZipEntry& e = zip.at(name);
  if (e.method != 0) {
    bad(path, "zip entry '" + clip(name) + "' is compressed (method " + std::to_string(e.method) +
                  "); torch.save stores entries uncompressed");
  }
  return e;
}

// --- the restricted unpickler ----------------------------------------------------------------

// Bounds on what a pickle may build (src/weights/torch_pickle.h): a state dict is a few levels deep
// and a few values per tensor; these are far above any real checkpoint and keep a hostile one from
// exhausting the C++ stack (destroying a deep chain recurses), the memory or the time.
constexpr size_t kMaxPickleBytes = size_t(64) << 20;  // data.pkl
constexpr int kMaxDepth = 100;                        // containers inside containers
constexpr size_t kMaxValues = size_t(1) << 22;        // values made, all told
constexpr size_t kMaxStack = size_t(1) << 20;         // values on the stack at once
// Entries of the top-level dict's dicts looked at, all told: one dict may be the value of many
// keys (memo references), and each would be copied out.
constexpr size_t kMaxNestedEntries = size_t(1) << 20;

struct Storage {
  std::string dtype;
  size_t element_size = 0;
  const unsigned char* data = nullptr;
  size_t numel = 0;
};

struct Value;
using ValuePtr = std::shared_ptr<Value>;

// What only storages and tensors carry, apart, so the many small values stay small.
struct Payload {
  Storage storage;
  TorchTensor tensor;
};

struct Value {
  enum class Kind {
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kBytes,
    kTuple,
    kList,
    kDict,
    kGlobal,
    kStorage,
    kTensor,
    kMark
  };
  Kind kind = Kind::kNone;
  // Put into another container: no longer changed (so no container holds itself, and the
  // depths below stay true).
  bool sealed = false;
  int depth = 1;  // 1 + the deepest value held
  int64_t integer = 0;
  double number = 0;
  std::string text;  // string, bytes, or "module.name" of a global
  std::vector<ValuePtr> items;
  std::vector<std::pair<ValuePtr, ValuePtr>> entries;  // dict, in insertion order
  // dict: the key (dict_key) → its index in `entries`, for the keys Python hashes by value.
  std::unique_ptr<std::unordered_map<std::string, size_t>> index;
  std::unique_ptr<Payload> payload;  // storage, tensor
};

const char* kind_name(Value::Kind k) {
  switch (k) {
    case Value::Kind::kNone:
      return "None";
    case Value::Kind::kBool:
      return "bool";
    case Value::Kind::kInt:
      return "int";
    case Value::Kind::kFloat:
      return "float";
    case Value::Kind::kString:
      return "str";
    case Value::Kind::kBytes:
      return "bytes";
    case Value::Kind::kTuple:
      return "tuple";
    case Value::Kind::kList:
      return "list";
    case Value::Kind::kDict:
      return "dict";
    case Value::Kind::kGlobal:
      return "global";
    case Value::Kind::kStorage:
      return "storage";
    case Value::Kind::kTensor:
      return "tensor";
    case Value::Kind::kMark:
      return "mark";
  }
  return "?";
}

// The identity of a dict key for the kinds that replace an equal key (strings, numbers, None,
// booleans); empty for the others, which are appended (tuples, tensors: never state-dict keys).
std::string dict_key(const Value& k) {
  switch (k.kind) {
    case Value::Kind::kNone:
    case Value::Kind::kBool:
    case Value::Kind::kInt:
    case Value::Kind::kFloat:
    case Value::Kind::kString:
    case Value::Kind::kBytes:
    case Value::Kind::kGlobal:
      break;
    default:
      return {};
  }
  std::string key(1 + 8 + 8, '\0');
  key[0] = char('A' + int(k.kind));
  std::memcpy(&key[1], &k.integer, 8);
  std::memcpy(&key[9], &k.number, 8);
  return key + k.text;
}

// torch.<Name>Storage → safetensors dtype and element size.
bool storage_dtype(const std::string& global, std::string& dtype, size_t& size) {
  static const std::map<std::string, std::pair<std::string, size_t>> kTypes = {
      {"torch.FloatStorage", {"F32", 4}}, {"torch.DoubleStorage", {"F64", 8}},
      {"torch.HalfStorage", {"F16", 2}},  {"torch.BFloat16Storage", {"BF16", 2}},
      {"torch.LongStorage", {"I64", 8}},  {"torch.IntStorage", {"I32", 4}},
      {"torch.ShortStorage", {"I16", 2}}, {"torch.CharStorage", {"I8", 1}},
      {"torch.ByteStorage", {"U8", 1}},   {"torch.BoolStorage", {"BOOL", 1}}};
  const auto it = kTypes.find(global);
  if (it == kTypes.end()) return false;
  dtype = it->second.first;
  size = it->second.second;
  return true;
}

bool allowed_global(const std::string& name) {
  std::string dtype;
  size_t size = 0;
  return name == "collections.OrderedDict" || name == "torch._utils._rebuild_tensor_v2" ||
         name == "torch._utils._rebuild_parameter" || storage_dtype(name, dtype, size);
}

// Runs a pickle in time linear in its size: every opcode costs O(1) amortised (dict keys are
// hashed, MARK scans pop what they pass), and nothing walks a built structure.
class Unpickler {
 public:
  Unpickler(const std::string& path, const unsigned char* data, size_t size,
            std::function<Storage(const std::string& key, const std::string& type, int64_t numel)>
                load_storage)
      : path_(path),
        p_(data),
        end_(data + size),
        begin_(data),
        load_storage_(std::move(load_storage)) {
    if (size > kMaxPickleBytes) {
      bad(path_, "refused: the checkpoint's pickle (data.pkl) has " + std::to_string(size) +
                     " bytes, more than the " + std::to_string(kMaxPickleBytes >> 20) +
                     " MiB a state dict of tensors needs (the tensors' data lie outside it)");
    }
  }

  ValuePtr run() {
    while (true) {
      const size_t at = size_t(p_ - begin_);
      const unsigned char op = byte();
      switch (op) {
        case 0x80:  // PROTO
          if (const int v = byte(); v < 2 || v > 5)
            fail(at, "pickle protocol " + std::to_string(v));
          break;
        case 0x95:  // FRAME
          take(8);
          break;
        case '}':
          push(make(Value::Kind::kDict));
          break;
        case ']':
          push(make(Value::Kind::kList));
          break;
        case ')':
          push(make(Value::Kind::kTuple));
          break;
        case '(':
          push(make(Value::Kind::kMark));
          break;
        case 't':
        case 'l': {
          auto t = make(op == 't' ? Value::Kind::kTuple : Value::Kind::kList);
          for (ValuePtr& item : pop_to_mark()) add_item(*t, std::move(item), at);
          push(t);
          break;
        }
        case 0x85:
        case 0x86:
        case 0x87: {
          auto t = make(Value::Kind::kTuple);
          std::vector<ValuePtr> items(op - 0x84);
          for (size_t i = items.size(); i-- > 0;) items[i] = pop();
          for (ValuePtr& item : items) add_item(*t, std::move(item), at);
          push(t);
          break;
        }
        case 'd': {
          auto d = make(Value::Kind::kDict);
          set_items(d, pop_to_mark(), at);
          push(d);
          break;
        }
        case 's': {
          ValuePtr value = pop(), key = pop();
          set_items(top(), {key, value}, at);
          break;
        }
        case 'u': {
          std::vector<ValuePtr> items = pop_to_mark();
          set_items(top(), items, at);
          break;
        }
        case 'a': {
          ValuePtr v = pop();
          add_item(*list_top(at), std::move(v), at);
          break;
        }
        case 'e': {
          std::vector<ValuePtr> items = pop_to_mark();
          const ValuePtr list = list_top(at);
          for (ValuePtr& item : items) add_item(*list, std::move(item), at);
          break;
        }
        case 'q':
          memo_[uint32_t(byte())] = top();
          break;
        case 'r':
          memo_[uint32_t(le(take(4), 4))] = top();
          break;
        case 0x94:  // MEMOIZE
          memo_[uint32_t(memo_.size())] = top();
          break;
        case 'h':
          push(memo(byte(), at));
          break;
        case 'j':
          push(memo(uint32_t(le(take(4), 4)), at));
          break;
        case 'X':
          push(string(Value::Kind::kString, le(take(4), 4)));
          break;
        case 0x8c:
          push(string(Value::Kind::kString, byte()));
          break;
        case 0x8d:
          push(string(Value::Kind::kString, le(take(8), 8)));
          break;
        case 'T':
          push(string(Value::Kind::kBytes, le(take(4), 4)));
          break;
        case 'U':
        case 'C':
          push(string(Value::Kind::kBytes, byte()));
          break;
        case 'B':
          push(string(Value::Kind::kBytes, le(take(4), 4)));
          break;
        case 'K':
          push(integer(byte()));
          break;
        case 'M':
          push(integer(int64_t(le(take(2), 2))));
          break;
        case 'J':
          push(integer(int64_t(int32_t(uint32_t(le(take(4), 4))))));
          break;
        case 0x8a: {  // LONG1: little-endian two's complement
          const size_t n = byte();
          if (n > 8) fail(at, "an integer of " + std::to_string(n) + " bytes");
          const unsigned char* b = take(n);
          uint64_t v = n ? le(b, int(n)) : 0;
          if (n && n < 8 && (b[n - 1] & 0x80)) v |= ~uint64_t(0) << (8 * n);
          push(integer(int64_t(v)));
          break;
        }
        case 'G': {
          const unsigned char* b = take(8);
          uint64_t bits = 0;
          for (int i = 0; i < 8; ++i) bits = (bits << 8) | b[i];  // big-endian
          auto v = make(Value::Kind::kFloat);
          std::memcpy(&v->number, &bits, 8);
          push(v);
          break;
        }
        case 'N':
          push(make(Value::Kind::kNone));
          break;
        case 0x88:
        case 0x89: {
          auto v = make(Value::Kind::kBool);
          v->integer = op == 0x88;
          push(v);
          break;
        }
        case 'c': {
          const std::string module = line(), name = line();
          push(global(module + "." + name, at));
          break;
        }
        case 0x93: {  // STACK_GLOBAL
          ValuePtr name = pop(), module = pop();
          if (name->kind != Value::Kind::kString || module->kind != Value::Kind::kString) {
            fail(at, "a global whose name is not a string");
          }
          push(global(module->text + "." + name->text, at));
          break;
        }
        case 'Q':
          push(persistent(pop(), at));
          break;
        case 'R': {
          ValuePtr args = pop(), callable = pop();
          push(reduce(callable, args, at));
          break;
        }
        case 'b': {
          pop();  // the state: OrderedDict's `_metadata` attribute
          if (top()->kind != Value::Kind::kDict) {
            fail(at, std::string("BUILD on a ") + kind_name(top()->kind) + " (only dicts)");
          }
          break;
        }
        case '0':
          pop();
          break;
        case '.':
          if (stack_.size() != 1)
            fail(at, "STOP with " + std::to_string(stack_.size()) + " values");
          return stack_.back();
        default: {
          char text[64];
          std::snprintf(text, sizeof text, "opcode 0x%02x", unsigned(op));
          fail(at, std::string(text) + " (not one a state dict of tensors uses)");
        }
      }
    }
  }

 private:
  [[noreturn]] void fail(size_t at, const std::string& what) const {
    bad(path_, "refused: the checkpoint's pickle (data.pkl, byte " + std::to_string(at) + ") has " +
                   what +
                   "; only dicts of tensors are read, a model file never runs "
                   "code");
  }
  [[noreturn]] void truncated() const {
    bad(path_, "malformed checkpoint: data.pkl ends early (truncated?)");
  }
  size_t offset() const { return size_t(p_ - begin_); }
  unsigned char byte() {
    if (p_ >= end_) truncated();
    return *p_++;
  }
  const unsigned char* take(size_t n) {
    if (size_t(end_ - p_) < n) truncated();
    const unsigned char* at = p_;
    p_ += n;
    return at;
  }
  std::string line() {
    const unsigned char* nl =
        static_cast<const unsigned char*>(std::memchr(p_, '\n', size_t(end_ - p_)));
    if (!nl) truncated();
    std::string s(reinterpret_cast<const char*>(p_), size_t(nl - p_));
    p_ = nl + 1;
    return s;
  }
  ValuePtr make(Value::Kind kind) {
    if (++made_ > kMaxValues) {
      fail(offset() - 1, "more than " + std::to_string(kMaxValues) +
                             " values (a state dict has a few per tensor)");
    }
    auto v = std::make_shared<Value>();
    v->kind = kind;
    return v;
  }
  ValuePtr string(Value::Kind kind, uint64_t n) {
    if (n > uint64_t(end_ - p_)) truncated();
    auto v = make(kind);
    const unsigned char* b = take(size_t(n));
    v->text.assign(reinterpret_cast<const char*>(b), size_t(n));
    return v;
  }
  ValuePtr integer(int64_t i) {
    auto v = make(Value::Kind::kInt);
    v->integer = i;
    return v;
  }
  void push(ValuePtr v) {
    if (stack_.size() >= kMaxStack) {
      fail(offset(), "a stack over " + std::to_string(kMaxStack) + " values");
    }
    stack_.push_back(std::move(v));
  }
  ValuePtr pop() {
    if (stack_.empty() || stack_.back()->kind == Value::Kind::kMark) {
      fail(offset() - 1, "an opcode with too few values on the stack");
    }
    ValuePtr v = std::move(stack_.back());
    stack_.pop_back();
    return v;
  }
  ValuePtr& top() {
    if (stack_.empty()) fail(offset() - 1, "an opcode on an empty stack");
    return stack_.back();
  }
  std::vector<ValuePtr> pop_to_mark() {
    size_t mark = stack_.size();
    while (mark > 0 && stack_[mark - 1]->kind != Value::Kind::kMark) --mark;
    if (mark == 0) fail(offset() - 1, "a missing MARK");
    std::vector<ValuePtr> items(std::make_move_iterator(stack_.begin() + long(mark)),
                                std::make_move_iterator(stack_.end()));
    stack_.resize(mark - 1);
    return items;
  }
  ValuePtr memo(uint32_t index, size_t at) {
    const auto it = memo_.find(index);
    if (it == memo_.end()) fail(at, "a memo reference to an unset slot");
    return it->second;
  }
  ValuePtr list_top(size_t at) {
    ValuePtr l = top();
    if (l->kind != Value::Kind::kList) fail(at, "APPEND to a non-list");
    return l;
  }
  // `child` goes into the container `into`: it is sealed, and `into` may not grow too deep.
  void hold(Value& into, Value& child, size_t at) {
    if (into.sealed || &into == &child) {
      fail(at, std::string("a ") + kind_name(into.kind) +
                   " changed after it was put into another container (a recursive "
                   "structure; a state dict has none)");
    }
    if (child.kind == Value::Kind::kMark) fail(at, "a MARK inside a container");
    child.sealed = true;
    if (child.depth + 1 > into.depth) into.depth = child.depth + 1;
    if (into.depth > kMaxDepth) {
      fail(at, "containers nested more than " + std::to_string(kMaxDepth) +
                   " deep (a state dict has a few levels)");
    }
  }
  void add_item(Value& into, ValuePtr item, size_t at) {
    hold(into, *item, at);
    into.items.push_back(std::move(item));
  }
  void set_items(const ValuePtr& dict, const std::vector<ValuePtr>& items, size_t at) {
    if (dict->kind != Value::Kind::kDict) fail(at, "SETITEM on a non-dict");
    if (items.size() % 2) fail(at, "SETITEMS with an odd number of values");
    if (!dict->index) dict->index = std::make_unique<std::unordered_map<std::string, size_t>>();
    for (size_t i = 0; i < items.size(); i += 2) {
      hold(*dict, *items[i], at);
      hold(*dict, *items[i + 1], at);
      const std::string key = dict_key(*items[i]);
      if (!key.empty()) {
        const auto [it, fresh] = dict->index->emplace(key, dict->entries.size());
        if (!fresh) {
          dict->entries[it->second].second = items[i + 1];
          continue;
        }
      }
      dict->entries.emplace_back(items[i], items[i + 1]);
    }
  }
  ValuePtr global(const std::string& name, size_t at) {
    if (!allowed_global(name)) fail(at, "the global '" + clip(name) + "'");
    auto v = make(Value::Kind::kGlobal);
    v->text = name;
    return v;
  }
  // ('storage', torch.FloatStorage, key, location, numel)
  ValuePtr persistent(const ValuePtr& pid, size_t at) {
    const auto& t = pid->items;
    if (pid->kind != Value::Kind::kTuple || t.size() != 5 || t[0]->kind != Value::Kind::kString ||
        t[0]->text != "storage" || t[1]->kind != Value::Kind::kGlobal ||
        t[2]->kind != Value::Kind::kString || t[4]->kind != Value::Kind::kInt ||
        t[4]->integer < 0) {
      fail(at, "a persistent id that is not a storage");
    }
    auto v = make(Value::Kind::kStorage);
    v->payload = std::make_unique<Payload>();
    v->payload->storage = load_storage_(t[2]->text, t[1]->text, t[4]->integer);
    return v;
  }
  ValuePtr reduce(const ValuePtr& callable, const ValuePtr& args, size_t at) {
    if (callable->kind != Value::Kind::kGlobal || args->kind != Value::Kind::kTuple) {
      fail(at, std::string("a call of a ") + kind_name(callable->kind));
    }
    const auto& a = args->items;
    const std::string& name = callable->text;
    if (name == "collections.OrderedDict") {
      if (!a.empty()) fail(at, "OrderedDict called with arguments");
      return make(Value::Kind::kDict);
    }
    if (name == "torch._utils._rebuild_parameter") {
      if (a.size() < 1 || a[0]->kind != Value::Kind::kTensor) {
        fail(at, "_rebuild_parameter without a tensor");
      }
      return a[0];
    }
    if (name == "torch._utils._rebuild_tensor_v2") return rebuild_tensor(a, at);
    fail(at, "a call of '" + clip(name) + "'");
  }
  // (storage, storage_offset, size, stride, requires_grad, backward_hooks[, metadata])
  ValuePtr rebuild_tensor(const std::vector<ValuePtr>& a, size_t at) {
    if (a.size() < 4 || a[0]->kind != Value::Kind::kStorage || a[1]->kind != Value::Kind::kInt ||
        a[2]->kind != Value::Kind::kTuple || a[3]->kind != Value::Kind::kTuple ||
        a[2]->items.size() != a[3]->items.size() || a[2]->items.size() > 64) {
      fail(at, "_rebuild_tensor_v2 with unexpected arguments");
    }
    const Storage& s = a[0]->payload->storage;
    auto v = make(Value::Kind::kTensor);
    v->payload = std::make_unique<Payload>();
    TorchTensor& t = v->payload->tensor;
    t.dtype = s.dtype;
    t.element_size = s.element_size;
    int64_t last = a[1]->integer;  // the furthest element reached
    bool empty = false;
    for (size_t i = 0; i < a[2]->items.size(); ++i) {
      const ValuePtr& n = a[2]->items[i];
      const ValuePtr& st = a[3]->items[i];
      if (n->kind != Value::Kind::kInt || st->kind != Value::Kind::kInt || n->integer < 0 ||
          st->integer < 0 || n->integer > (int64_t(1) << 40) || st->integer > (int64_t(1) << 40)) {
        fail(at, "a tensor with a bad size or stride");
      }
      t.shape.push_back(n->integer);
      t.strides.push_back(st->integer);
      int64_t reach = 0;
      if (n->integer == 0) {
        empty = true;
      } else if (__builtin_mul_overflow(n->integer - 1, st->integer, &reach) ||
                 __builtin_add_overflow(last, reach, &last)) {
        fail(at, "a tensor with a bad size or stride");
      }
    }
    if (a[1]->integer < 0 || (!empty && uint64_t(last) >= s.numel) ||
        (empty && uint64_t(a[1]->integer) > s.numel)) {
      bad(path_, "malformed checkpoint: a tensor reaches past its storage");
    }
    t.data = s.data + size_t(a[1]->integer) * s.element_size;
    return v;
  }

  std::string path_;
  const unsigned char* p_;
  const unsigned char* end_;
  const unsigned char* begin_;
  std::function<Storage(const std::string&, const std::string&, int64_t)> load_storage_;
  std::vector<ValuePtr> stack_;
  std::unordered_map<uint32_t, ValuePtr> memo_;
  size_t made_ = 0;
};

}  // namespace

bool TorchTensor::contiguous() const {
  int64_t expected = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    if (shape[i] != 1 && strides[i] != expected) return false;
    expected *= shape[i];
  }
  return true;
}

TorchCheckpoint::TorchCheckpoint(const std::string& path) : path_(path) {
  file_ = MappedFile(path);
  if (file_.size() == 0) bad(path, "empty file, not a PyTorch checkpoint");
  const unsigned char* bytes = file_.data();
  const std::map<std::string, ZipEntry> zip = read_zip(path, bytes, file_.size());
  std::string stem;
  for (const auto& [name, entry] : zip) {
    const size_t slash = name.find('/');
    if (slash != std::string::npos && name.substr(slash) == "/data.pkl") {
      if (!stem.empty()) bad(path, "two data.pkl entries in one checkpoint");
      stem = name.substr(0, slash);
    }
  }
  if (stem.empty()) bad(path, "a zip without <name>/data.pkl, not a torch.save checkpoint");
  if (zip.count(stem + "/constants.pkl") || zip.count(stem + "/code/__torch__.py")) {
    bad(path, "refused: a TorchScript archive, not a state dict (load it with kind torchscript)");
  }
  if (const auto it = zip.find(stem + "/byteorder"); it != zip.end()) {
    const ZipEntry& e = stored(path, zip, it->first);
    const std::string order(reinterpret_cast<const char*>(bytes + e.offset), e.size);
    if (order != "little")
      bad(path, "storages are " + clip(order) + "-endian (only little-endian)");
  }
  const auto load_storage = [&](const std::string& key, const std::string& type, int64_t numel) {
    Storage s;
    if (!storage_dtype(type, s.dtype, s.element_size)) bad(path, "unknown storage " + type);
    const auto it = zip.find(stem + "/data/" + key);
    if (it == zip.end()) bad(path, "malformed checkpoint: storage '" + clip(key) + "' is missing");
    if (uint64_t(numel) > stored(path, zip, it->first).size / s.element_size) {
      bad(path, "malformed checkpoint: storage '" + clip(key) + "' is shorter than its " +
                    std::to_string(numel) + " elements");
    }
    s.data = bytes + it->second.offset;
    s.numel = size_t(numel);
    return s;
  };
  const ZipEntry& pkl = stored(path, zip, stem + "/data.pkl");
  Unpickler unpickler(path, bytes + pkl.offset, pkl.size, load_storage);
  const ValuePtr root = unpickler.run();
  if (root->kind == Value::Kind::kTensor) {  // torch.save(tensor): pos_emb.pt, for one
    root_ = root->payload->tensor;
    has_root_ = true;
    return;
  }
  if (root->kind != Value::Kind::kDict) {
    bad(path, std::string("the checkpoint holds a ") + kind_name(root->kind) +
                  ", not a tensor or a dict of tensors");
  }
  // One dict may be the value of many keys (memo references): the entries looked at are
  // bounded too (kMaxNestedEntries), so this stays linear in what was read.
  size_t copied = 0;
  for (const auto& [key, value] : root->entries) {
    if (key->kind != Value::Kind::kString) continue;
    top_level_[key->text] = kind_name(value->kind);
    if (value->kind == Value::Kind::kTensor) tensors_[key->text] = value->payload->tensor;
    if (value->kind != Value::Kind::kDict) continue;
    auto& inner = dicts_[key->text];
    for (const auto& [k, v] : value->entries) {
      if (++copied > kMaxNestedEntries) {
        bad(path, "refused: the checkpoint's nested dicts hold more than " +
                      std::to_string(kMaxNestedEntries) + " entries in all");
      }
      if (k->kind == Value::Kind::kString && v->kind == Value::Kind::kTensor) {
        inner[k->text] = v->payload->tensor;
      }
    }
  }
}

const std::map<std::string, TorchTensor>& TorchCheckpoint::dict(const std::string& key) const {
  static const std::map<std::string, TorchTensor> kEmpty;
  const auto it = dicts_.find(key);
  return it == dicts_.end() ? kEmpty : it->second;
}

}  // namespace wm::io
