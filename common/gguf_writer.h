// Minimal GGUF v3 writer: used by tests (hand-built and hostile files) and by tools that
// synthesize models with real shapes. Produces files the reader (and llama.cpp) accepts.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/gguf.h"

namespace ds {

class GgufWriter {
 public:
  void add_u32(const std::string& key, uint32_t v);
  void add_i32(const std::string& key, int32_t v);
  void add_u64(const std::string& key, uint64_t v);
  void add_f32(const std::string& key, float v);
  void add_bool(const std::string& key, bool v);
  void add_string(const std::string& key, const std::string& v);
  void add_string_array(const std::string& key, const std::vector<std::string>& v);
  void add_i32_array(const std::string& key, const std::vector<int32_t>& v);
  void add_f32_array(const std::string& key, const std::vector<float>& v);
  // Raw escape hatch for tests: a value of any type with its encoded bytes.
  void add_raw(const std::string& key, GgufType type, const std::vector<uint8_t>& encoded);

  // `data` holds the tensor bytes in `type`'s layout (ggml_row_bytes(type, ne0) * rows).
  void add_tensor(const std::string& name, GgmlType type, const std::vector<uint64_t>& ne, std::vector<uint8_t> data);

  void set_alignment(uint32_t a) { alignment_ = a; }
  std::vector<uint8_t> serialize() const;
  void write(const std::string& path) const;

 private:
  struct Tensor {
    std::string name;
    GgmlType type;
    std::vector<uint64_t> ne;
    std::vector<uint8_t> data;
  };
  std::vector<uint8_t> kv_bytes_;
  uint64_t n_kv_ = 0;
  std::vector<Tensor> tensors_;
  uint32_t alignment_ = 32;
};

// Quantizes f32 values to Q8_0 blocks (d = max|x|/127, q = round(x/d)); n % 32 == 0.
std::vector<uint8_t> quantize_q8_0(const float* x, size_t n);

}  // namespace ds
