#include "common/gguf.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "common/error.h"
#include "common/mapped_file.h"

namespace ds {
namespace {

constexpr uint64_t kMaxDims = 4;
constexpr uint64_t kMaxStringBytes = uint64_t{1} << 30;

size_t scalar_size(GgufType t) {
  switch (t) {
    case GgufType::UINT8:
    case GgufType::INT8:
    case GgufType::BOOL:
      return 1;
    case GgufType::UINT16:
    case GgufType::INT16:
      return 2;
    case GgufType::UINT32:
    case GgufType::INT32:
    case GgufType::FLOAT32:
      return 4;
    case GgufType::UINT64:
    case GgufType::INT64:
    case GgufType::FLOAT64:
      return 8;
    default:
      return 0;
  }
}

bool valid_type(uint32_t t) {
  return t <= static_cast<uint32_t>(GgufType::FLOAT64);
}

// Bounds-checked little-endian cursor over the file bytes.
class Cursor {
 public:
  Cursor(const uint8_t* base, uint64_t size) : base_(base), size_(size) {}
  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return size_ - pos_; }

  void need(uint64_t n, const char* what) const {
    if (n > remaining()) {
      throw FormatError(std::string("truncated file: ") + what + " needs " + std::to_string(n) + " bytes at offset " +
                        std::to_string(pos_) + ", " + std::to_string(remaining()) + " left");
    }
  }
  template <typename T>
  T read(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, base_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string_view read_string(const char* what) {
    const uint64_t len = read<uint64_t>(what);
    if (len > kMaxStringBytes)
      throw FormatError(std::string(what) + ": string length " + std::to_string(len) + " is implausible");
    need(len, what);
    std::string_view s(reinterpret_cast<const char*>(base_ + pos_), len);
    pos_ += len;
    return s;
  }
  const uint8_t* take(uint64_t n, const char* what) {
    need(n, what);
    const uint8_t* p = base_ + pos_;
    pos_ += n;
    return p;
  }

 private:
  const uint8_t* base_;
  uint64_t size_;
  uint64_t pos_ = 0;
};

void read_scalar(Cursor& c, GgufType t, GgufValue& v, const std::string& key) {
  const char* what = key.c_str();
  switch (t) {
    case GgufType::UINT8:
      v.u64 = c.read<uint8_t>(what);
      break;
    case GgufType::INT8:
      v.i64 = c.read<int8_t>(what);
      break;
    case GgufType::UINT16:
      v.u64 = c.read<uint16_t>(what);
      break;
    case GgufType::INT16:
      v.i64 = c.read<int16_t>(what);
      break;
    case GgufType::UINT32:
      v.u64 = c.read<uint32_t>(what);
      break;
    case GgufType::INT32:
      v.i64 = c.read<int32_t>(what);
      break;
    case GgufType::UINT64:
      v.u64 = c.read<uint64_t>(what);
      break;
    case GgufType::INT64:
      v.i64 = c.read<int64_t>(what);
      break;
    case GgufType::FLOAT32:
      v.f64 = c.read<float>(what);
      break;
    case GgufType::FLOAT64:
      v.f64 = c.read<double>(what);
      break;
    case GgufType::BOOL: {
      const uint8_t b = c.read<uint8_t>(what);
      if (b > 1) throw FormatError("metadata '" + key + "': bool value " + std::to_string(b) + " is not 0 or 1");
      v.u64 = b;
      break;
    }
    case GgufType::STRING:
      v.str = c.read_string(what);
      break;
    default:
      throw FormatError("metadata '" + key + "': unexpected value type");
  }
}

GgufValue read_value(Cursor& c, GgufType t, const std::string& key) {
  GgufValue v;
  v.type = t;
  if (t != GgufType::ARRAY) {
    read_scalar(c, t, v, key);
    return v;
  }
  const uint32_t et = c.read<uint32_t>(key.c_str());
  if (!valid_type(et)) throw FormatError("metadata '" + key + "': unknown array element type " + std::to_string(et));
  v.elem_type = static_cast<GgufType>(et);
  if (v.elem_type == GgufType::ARRAY) throw FormatError("metadata '" + key + "': nested arrays are not supported");
  v.count = c.read<uint64_t>(key.c_str());
  if (v.elem_type == GgufType::STRING) {
    // Each string needs at least its 8-byte length: reject counts the file cannot hold.
    if (v.count > c.remaining() / 8)
      throw FormatError("metadata '" + key + "': array count " + std::to_string(v.count) + " exceeds the file size");
    v.strings.reserve(v.count);
    for (uint64_t i = 0; i < v.count; ++i) v.strings.push_back(c.read_string(key.c_str()));
  } else {
    const size_t es = scalar_size(v.elem_type);
    if (v.count > c.remaining() / es)
      throw FormatError("metadata '" + key + "': array count " + std::to_string(v.count) + " exceeds the file size");
    v.array_data = c.take(v.count * es, key.c_str());
  }
  return v;
}

uint64_t checked_mul(uint64_t a, uint64_t b, const std::string& what) {
  if (a != 0 && b > std::numeric_limits<uint64_t>::max() / a) throw FormatError(what + ": size overflows");
  return a * b;
}

}  // namespace

const char* gguf_type_name(GgufType type) {
  switch (type) {
    case GgufType::UINT8:
      return "uint8";
    case GgufType::INT8:
      return "int8";
    case GgufType::UINT16:
      return "uint16";
    case GgufType::INT16:
      return "int16";
    case GgufType::UINT32:
      return "uint32";
    case GgufType::INT32:
      return "int32";
    case GgufType::FLOAT32:
      return "float32";
    case GgufType::BOOL:
      return "bool";
    case GgufType::STRING:
      return "string";
    case GgufType::ARRAY:
      return "array";
    case GgufType::UINT64:
      return "uint64";
    case GgufType::INT64:
      return "int64";
    case GgufType::FLOAT64:
      return "float64";
  }
  return "unknown";
}

bool GgufValue::is_integer() const {
  switch (type) {
    case GgufType::UINT8:
    case GgufType::INT8:
    case GgufType::UINT16:
    case GgufType::INT16:
    case GgufType::UINT32:
    case GgufType::INT32:
    case GgufType::UINT64:
    case GgufType::INT64:
      return true;
    default:
      return false;
  }
}

std::string GgufValue::type_string() const {
  if (type != GgufType::ARRAY) return gguf_type_name(type);
  return std::string("array<") + gguf_type_name(elem_type) + ">[" + std::to_string(count) + "]";
}

std::string GgufTensor::shape_string() const {
  std::string s = "[";
  for (uint32_t i = 0; i < n_dims; ++i) s += (i ? ", " : "") + std::to_string(ne[i]);
  return s + "]";
}

double gguf_array_f64(const GgufValue& v, uint64_t i) {
  const uint8_t* p = v.array_data + i * scalar_size(v.elem_type);
  switch (v.elem_type) {
    case GgufType::FLOAT32: {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    }
    case GgufType::FLOAT64: {
      double d;
      std::memcpy(&d, p, 8);
      return d;
    }
    default:
      return static_cast<double>(gguf_array_i64(v, i));
  }
}

int64_t gguf_array_i64(const GgufValue& v, uint64_t i) {
  const uint8_t* p = v.array_data + i * scalar_size(v.elem_type);
  switch (v.elem_type) {
    case GgufType::UINT8:
    case GgufType::BOOL:
      return *p;
    case GgufType::INT8:
      return static_cast<int8_t>(*p);
    case GgufType::UINT16: {
      uint16_t x;
      std::memcpy(&x, p, 2);
      return x;
    }
    case GgufType::INT16: {
      int16_t x;
      std::memcpy(&x, p, 2);
      return x;
    }
    case GgufType::UINT32: {
      uint32_t x;
      std::memcpy(&x, p, 4);
      return x;
    }
    case GgufType::INT32: {
      int32_t x;
      std::memcpy(&x, p, 4);
      return x;
    }
    case GgufType::UINT64: {
      uint64_t x;
      std::memcpy(&x, p, 8);
      return static_cast<int64_t>(x);
    }
    case GgufType::INT64: {
      int64_t x;
      std::memcpy(&x, p, 8);
      return x;
    }
    default:
      return 0;
  }
}

GgufFile GgufFile::open(const std::string& path) {
  GgufFile f;
  f.source_ = path;
  auto map = std::make_shared<const MappedFile>(path);
  f.base_ = map->data();
  f.size_ = map->size();
  f.map_ = std::move(map);
  try {
    f.parse();
  } catch (const FormatError& e) {
    throw FormatError("GGUF '" + path + "': " + e.what());
  }
  return f;
}

GgufFile GgufFile::from_bytes(std::vector<uint8_t> bytes) {
  GgufFile f;
  f.source_ = "<memory>";
  auto owned = std::make_shared<const std::vector<uint8_t>>(std::move(bytes));
  f.base_ = owned->data();
  f.size_ = owned->size();
  f.owned_ = std::move(owned);
  f.parse();
  return f;
}

GgufFile GgufFile::from_view(const uint8_t* data, size_t size) {
  GgufFile f;
  f.source_ = "<memory>";
  f.base_ = data;
  f.size_ = size;
  f.parse();
  return f;
}

void GgufFile::parse() {
  Cursor c(base_, size_);
  c.need(4, "magic");
  if (std::memcmp(c.take(4, "magic"), "GGUF", 4) != 0) throw FormatError("not a GGUF file (bad magic)");
  version_ = c.read<uint32_t>("version");
  if (version_ != 3) throw FormatError("unsupported GGUF version " + std::to_string(version_) + " (need 3)");
  const uint64_t n_tensors = c.read<uint64_t>("tensor_count");
  const uint64_t n_kv = c.read<uint64_t>("kv_count");
  // The smallest KV pair is 8 (key len) + 4 (type) + 1 bytes; the smallest tensor info 8+4+4+8.
  if (n_kv > c.remaining() / 13) throw FormatError("kv_count " + std::to_string(n_kv) + " exceeds the file size");
  if (n_tensors > c.remaining() / 24)
    throw FormatError("tensor_count " + std::to_string(n_tensors) + " exceeds the file size");

  kv_.reserve(n_kv);
  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string key(c.read_string("metadata key"));
    const uint32_t t = c.read<uint32_t>("metadata value type");
    if (!valid_type(t)) throw FormatError("metadata '" + key + "': unknown value type " + std::to_string(t));
    GgufValue v = read_value(c, static_cast<GgufType>(t), key);
    if (kv_index_.count(key)) throw FormatError("duplicate metadata key '" + key + "'");
    kv_index_.emplace(key, kv_.size());
    kv_.emplace_back(std::move(key), std::move(v));
  }

  if (const GgufValue* a = find("general.alignment")) {
    if (a->type != GgufType::UINT32 || a->u64 == 0 || (a->u64 & (a->u64 - 1)) != 0) {
      throw FormatError("general.alignment must be a non-zero power of two uint32");
    }
    alignment_ = static_cast<uint32_t>(a->u64);
  }

  tensors_.reserve(n_tensors);
  for (uint64_t i = 0; i < n_tensors; ++i) {
    GgufTensor t;
    t.name = std::string(c.read_string("tensor name"));
    t.n_dims = c.read<uint32_t>("tensor n_dims");
    if (t.n_dims == 0 || t.n_dims > kMaxDims)
      throw FormatError("tensor '" + t.name + "': n_dims " + std::to_string(t.n_dims) + " out of range 1..4");
    for (uint32_t d = 0; d < t.n_dims; ++d) {
      t.ne[d] = c.read<uint64_t>("tensor dims");
      if (t.ne[d] == 0 || t.ne[d] > (uint64_t{1} << 40))
        throw FormatError("tensor '" + t.name + "': dimension " + std::to_string(d) + " = " + std::to_string(t.ne[d]) +
                          " out of range");
    }
    const uint32_t type = c.read<uint32_t>("tensor type");
    GgmlTypeTraits traits;
    if (!ggml_type_traits(type, &traits))
      throw FormatError("tensor '" + t.name + "': unknown ggml type " + std::to_string(type));
    t.type = static_cast<GgmlType>(type);
    t.offset = c.read<uint64_t>("tensor offset");
    if (t.ne[0] % traits.block_elems != 0)
      throw FormatError("tensor '" + t.name + "': ne0 " + std::to_string(t.ne[0]) + " is not a multiple of the " +
                        traits.name + " block size");
    uint64_t rows = checked_mul(checked_mul(t.ne[1], t.ne[2], t.name), t.ne[3], t.name);
    t.nbytes = checked_mul(t.ne[0] / traits.block_elems * traits.block_bytes, rows, t.name);
    if (tensor_index_.count(t.name)) throw FormatError("duplicate tensor '" + t.name + "'");
    tensor_index_.emplace(t.name, tensors_.size());
    tensors_.push_back(std::move(t));
  }

  data_offset_ = (c.pos() + alignment_ - 1) / alignment_ * alignment_;
  if (data_offset_ > size_ && n_tensors > 0) throw FormatError("truncated file: data section starts past the end");
  const uint64_t data_size = size_ >= data_offset_ ? size_ - data_offset_ : 0;
  for (auto& t : tensors_) {
    if (t.offset % alignment_ != 0)
      throw FormatError("tensor '" + t.name + "': offset " + std::to_string(t.offset) + " is not aligned to " +
                        std::to_string(alignment_));
    if (t.offset > data_size || t.nbytes > data_size - t.offset) {
      throw FormatError("tensor '" + t.name + "': data [" + std::to_string(t.offset) + ", +" +
                        std::to_string(t.nbytes) + ") lies outside the data section of " + std::to_string(data_size) +
                        " bytes (truncated file?)");
    }
    t.data = base_ + data_offset_ + t.offset;
  }
}

const GgufValue* GgufFile::find(std::string_view key) const {
  auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kv_[it->second].second;
}

const GgufValue& GgufFile::require(std::string_view key, const char* expected) const {
  const GgufValue* v = find(key);
  if (v == nullptr) throw FormatError("GGUF key '" + std::string(key) + "' (" + expected + ") is missing");
  return *v;
}

namespace {
[[noreturn]] void wrong_type(std::string_view key, const char* expected, const GgufValue& v) {
  throw FormatError("GGUF key '" + std::string(key) + "': expected " + expected + ", found " + v.type_string());
}
}  // namespace

int64_t GgufFile::get_i64(std::string_view key) const {
  const GgufValue& v = require(key, "integer");
  switch (v.type) {
    case GgufType::UINT8:
    case GgufType::UINT16:
    case GgufType::UINT32:
      return static_cast<int64_t>(v.u64);
    case GgufType::UINT64:
      if (v.u64 > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) wrong_type(key, "int64", v);
      return static_cast<int64_t>(v.u64);
    case GgufType::INT8:
    case GgufType::INT16:
    case GgufType::INT32:
    case GgufType::INT64:
      return v.i64;
    default:
      wrong_type(key, "integer", v);
  }
}

uint64_t GgufFile::get_u64(std::string_view key) const {
  const GgufValue& v = require(key, "uint64");
  if (!v.is_integer()) wrong_type(key, "unsigned integer", v);
  if (v.type == GgufType::UINT64) return v.u64;
  const int64_t x = get_i64(key);
  if (x < 0)
    throw FormatError("GGUF key '" + std::string(key) + "': expected a non-negative integer, found " +
                      std::to_string(x));
  return static_cast<uint64_t>(x);
}

uint32_t GgufFile::get_u32(std::string_view key) const {
  const GgufValue& v = require(key, "uint32");
  if (!v.is_integer()) wrong_type(key, "uint32", v);
  const uint64_t x = get_u64(key);
  if (x > std::numeric_limits<uint32_t>::max())
    throw FormatError("GGUF key '" + std::string(key) + "': value " + std::to_string(x) + " does not fit uint32");
  return static_cast<uint32_t>(x);
}

float GgufFile::get_f32(std::string_view key) const {
  const GgufValue& v = require(key, "float32");
  if (v.type == GgufType::FLOAT32 || v.type == GgufType::FLOAT64) return static_cast<float>(v.f64);
  wrong_type(key, "float32", v);
}

bool GgufFile::get_bool(std::string_view key) const {
  const GgufValue& v = require(key, "bool");
  if (v.type != GgufType::BOOL) wrong_type(key, "bool", v);
  return v.u64 != 0;
}

std::string GgufFile::get_string(std::string_view key) const {
  const GgufValue& v = require(key, "string");
  if (v.type != GgufType::STRING) wrong_type(key, "string", v);
  return std::string(v.str);
}

const std::vector<std::string_view>& GgufFile::get_string_array(std::string_view key) const {
  const GgufValue& v = require(key, "array<string>");
  if (v.type != GgufType::ARRAY || v.elem_type != GgufType::STRING) wrong_type(key, "array<string>", v);
  return v.strings;
}

std::vector<int64_t> GgufFile::get_int_array(std::string_view key) const {
  const GgufValue& v = require(key, "array<integer>");
  if (v.type != GgufType::ARRAY) wrong_type(key, "array<integer>", v);
  GgufValue probe;
  probe.type = v.elem_type;
  if (!probe.is_integer() && v.elem_type != GgufType::BOOL) wrong_type(key, "array<integer>", v);
  std::vector<int64_t> out(v.count);
  for (uint64_t i = 0; i < v.count; ++i) out[i] = gguf_array_i64(v, i);
  return out;
}

std::vector<float> GgufFile::get_f32_array(std::string_view key) const {
  const GgufValue& v = require(key, "array<float32>");
  if (v.type != GgufType::ARRAY || v.elem_type == GgufType::STRING) wrong_type(key, "array<float32>", v);
  std::vector<float> out(v.count);
  for (uint64_t i = 0; i < v.count; ++i) out[i] = static_cast<float>(gguf_array_f64(v, i));
  return out;
}

uint32_t GgufFile::get_u32_or(std::string_view key, uint32_t fallback) const {
  return has(key) ? get_u32(key) : fallback;
}
float GgufFile::get_f32_or(std::string_view key, float fallback) const {
  return has(key) ? get_f32(key) : fallback;
}
bool GgufFile::get_bool_or(std::string_view key, bool fallback) const {
  return has(key) ? get_bool(key) : fallback;
}
std::string GgufFile::get_string_or(std::string_view key, const std::string& fallback) const {
  return has(key) ? get_string(key) : fallback;
}

const GgufTensor* GgufFile::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const GgufTensor& GgufFile::tensor(std::string_view name) const {
  const GgufTensor* t = find_tensor(name);
  if (t == nullptr) throw ConfigError("GGUF '" + source_ + "': tensor '" + std::string(name) + "' is missing");
  return *t;
}

}  // namespace ds
