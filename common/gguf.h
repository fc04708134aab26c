// GGUF v3 reader (qwen35-model-spec.md §12.1). The file is memory-mapped; metadata is parsed
// once and validated: every string, array, tensor offset and size is checked against the file
// size, so a truncated or hostile file yields ds::FormatError, never an out-of-bounds read.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/ggml_types.h"

namespace ds {

class MappedFile;

enum class GgufType : uint32_t {
  UINT8 = 0,
  INT8 = 1,
  UINT16 = 2,
  INT16 = 3,
  UINT32 = 4,
  INT32 = 5,
  FLOAT32 = 6,
  BOOL = 7,
  STRING = 8,
  ARRAY = 9,
  UINT64 = 10,
  INT64 = 11,
  FLOAT64 = 12,
};
const char* gguf_type_name(GgufType type);

// One metadata value. Scalars are widened into one of u64/i64/f64; strings and array
// elements point into the mapping (valid as long as the GgufFile lives).
struct GgufValue {
  GgufType type = GgufType::UINT8;
  uint64_t u64 = 0;  // unsigned integers and bool
  int64_t i64 = 0;   // signed integers
  double f64 = 0;    // floats
  std::string_view str;
  // Arrays: element type, count, raw little-endian element bytes (non-string arrays),
  // or the strings themselves (string arrays).
  GgufType elem_type = GgufType::UINT8;
  uint64_t count = 0;
  const uint8_t* array_data = nullptr;
  std::vector<std::string_view> strings;

  bool is_integer() const;
  bool is_array() const { return type == GgufType::ARRAY; }
  std::string type_string() const;  // e.g. "uint32" or "array<string>[151936]"
};

struct GgufTensor {
  std::string name;
  uint32_t n_dims = 0;
  std::array<uint64_t, 4> ne{1, 1, 1, 1};  // ggml order: ne[0] is contiguous
  GgmlType type = GgmlType::F32;
  uint64_t offset = 0;  // relative to the data section
  uint64_t nbytes = 0;
  const uint8_t* data = nullptr;

  uint64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
  uint64_t n_rows() const { return ne[1] * ne[2] * ne[3]; }
  size_t row_bytes() const { return ggml_row_bytes(type, ne[0]); }
  std::string shape_string() const;  // "[64, 151936]"
};

class GgufFile {
 public:
  // Maps and parses a file. Throws ds::FormatError with the path and the reason.
  static GgufFile open(const std::string& path);
  // Parses a copy of `bytes` (used by the fuzz target and tests).
  static GgufFile from_bytes(std::vector<uint8_t> bytes);
  // Parses caller-owned memory without copying; `data` must outlive the GgufFile.
  static GgufFile from_view(const uint8_t* data, size_t size);

  uint32_t version() const { return version_; }
  uint32_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }
  uint64_t file_size() const { return size_; }
  const std::string& source() const { return source_; }

  // ---- metadata -------------------------------------------------------------------------
  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return kv_; }
  const GgufValue* find(std::string_view key) const;
  bool has(std::string_view key) const { return find(key) != nullptr; }

  // Typed accessors: throw ds::FormatError naming the key and the expected type when the key
  // is missing or holds another type (integers convert when the value fits).
  uint32_t get_u32(std::string_view key) const;
  uint64_t get_u64(std::string_view key) const;
  int64_t get_i64(std::string_view key) const;
  float get_f32(std::string_view key) const;
  bool get_bool(std::string_view key) const;
  std::string get_string(std::string_view key) const;
  const std::vector<std::string_view>& get_string_array(std::string_view key) const;
  std::vector<int64_t> get_int_array(std::string_view key) const;
  std::vector<float> get_f32_array(std::string_view key) const;

  uint32_t get_u32_or(std::string_view key, uint32_t fallback) const;
  float get_f32_or(std::string_view key, float fallback) const;
  bool get_bool_or(std::string_view key, bool fallback) const;
  std::string get_string_or(std::string_view key, const std::string& fallback) const;

  // ---- tensors ---------------------------------------------------------------------------
  const std::vector<GgufTensor>& tensors() const { return tensors_; }
  const GgufTensor* find_tensor(std::string_view name) const;
  const GgufTensor& tensor(std::string_view name) const;  // throws ConfigError when missing

 private:
  GgufFile() = default;
  void parse();
  const GgufValue& require(std::string_view key, const char* expected) const;

  std::string source_;
  std::shared_ptr<const MappedFile> map_;
  std::shared_ptr<const std::vector<uint8_t>> owned_;
  const uint8_t* base_ = nullptr;
  uint64_t size_ = 0;
  uint32_t version_ = 0;
  uint32_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::map<std::string, size_t, std::less<>> kv_index_;
  std::vector<GgufTensor> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
};

// Reads a scalar element `i` of a non-string array as double / int64 (little-endian).
double gguf_array_f64(const GgufValue& v, uint64_t i);
int64_t gguf_array_i64(const GgufValue& v, uint64_t i);

}  // namespace ds
