// A GGUF v3 writer for files too large to build in memory (qwen35-model-spec.md §12.1). The
// metadata and tensor list are declared first, which fixes every tensor's offset; open() writes
// the header and sizes the file, after which any thread may write any tensor's bytes at their
// final place (pwrite), in any order. Memory use is the header plus the callers' own buffers.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/ggml_types.h"
#include "common/gguf.h"

namespace ds::synth {

struct StreamTensor {
  std::string name;
  GgmlType type = GgmlType::F32;
  std::vector<uint64_t> ne;  // ggml order, ne[0] contiguous
  uint64_t nbytes = 0;       // filled by add_tensor
  uint64_t offset = 0;       // relative to the data section, filled by add_tensor
  uint64_t row_bytes() const { return ggml_row_bytes(type, ne.at(0)); }
  uint64_t n_rows() const;
  uint64_t n_elements() const { return n_rows() * ne.at(0); }
};

class GgufStreamWriter {
 public:
  GgufStreamWriter() = default;
  ~GgufStreamWriter();
  GgufStreamWriter(const GgufStreamWriter&) = delete;
  GgufStreamWriter& operator=(const GgufStreamWriter&) = delete;

  // ---- declaration (before open) ----
  void add_u32(const std::string& key, uint32_t v);
  void add_f32(const std::string& key, float v);
  void add_string(const std::string& key, const std::string& v);
  void add_i32_array(const std::string& key, const std::vector<int32_t>& v);
  void add_f32_array(const std::string& key, const std::vector<float>& v);
  void add_bool(const std::string& key, bool v);
  void add_string_array(const std::string& key, const std::vector<std::string_view>& v);
  // Re-encodes a value read by GgufFile (any scalar, string or non-nested array) unchanged.
  void add_value(const std::string& key, const GgufValue& v);
  // Returns the tensor's index; its offset is fixed from here on.
  size_t add_tensor(const std::string& name, GgmlType type, const std::vector<uint64_t>& ne);

  const std::vector<StreamTensor>& tensors() const { return tensors_; }
  uint64_t data_bytes() const { return data_bytes_; }
  uint64_t file_bytes() const { return data_start_ + data_bytes_; }  // valid after open()

  // ---- writing ----
  // Creates `path`, writes the header and sizes the file (padding reads back as zeros).
  void open(const std::string& path);
  // Writes `n` bytes of tensor `index` starting at byte `at` of that tensor. Thread-safe.
  void write_tensor_bytes(size_t index, uint64_t at, const void* data, size_t n) const;
  // Flushes and closes; throws if the file could not be written completely.
  void close();

 private:
  std::vector<uint8_t> header() const;

  std::vector<uint8_t> kv_bytes_;
  uint64_t n_kv_ = 0;
  std::vector<StreamTensor> tensors_;
  uint64_t data_bytes_ = 0;
  uint64_t data_start_ = 0;
  int fd_ = -1;
  std::string path_;
  static constexpr uint64_t kAlignment = 32;  // the GGUF default; no general.alignment key needed
};

}  // namespace ds::synth
