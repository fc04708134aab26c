#include "common/gguf_writer.h"

#include <cmath>
#include <cstring>
#include <fstream>

#include "common/error.h"

namespace ds {
namespace {

template <typename T>
void put(std::vector<uint8_t>& out, T v) {
  const size_t at = out.size();
  out.resize(at + sizeof(T));
  std::memcpy(out.data() + at, &v, sizeof(T));
}

void append(std::vector<uint8_t>& out, const void* data, size_t n) {
  if (n == 0) return;
  const size_t at = out.size();
  out.resize(at + n);
  std::memcpy(out.data() + at, data, n);
}

void put_string(std::vector<uint8_t>& out, const std::string& s) {
  put<uint64_t>(out, s.size());
  append(out, s.data(), s.size());
}

}  // namespace

void GgufWriter::add_raw(const std::string& key, GgufType type, const std::vector<uint8_t>& encoded) {
  put_string(kv_bytes_, key);
  put<uint32_t>(kv_bytes_, static_cast<uint32_t>(type));
  append(kv_bytes_, encoded.data(), encoded.size());
  ++n_kv_;
}

void GgufWriter::add_u32(const std::string& key, uint32_t v) {
  std::vector<uint8_t> b;
  put(b, v);
  add_raw(key, GgufType::UINT32, b);
}
void GgufWriter::add_i32(const std::string& key, int32_t v) {
  std::vector<uint8_t> b;
  put(b, v);
  add_raw(key, GgufType::INT32, b);
}
void GgufWriter::add_u64(const std::string& key, uint64_t v) {
  std::vector<uint8_t> b;
  put(b, v);
  add_raw(key, GgufType::UINT64, b);
}
void GgufWriter::add_f32(const std::string& key, float v) {
  std::vector<uint8_t> b;
  put(b, v);
  add_raw(key, GgufType::FLOAT32, b);
}
void GgufWriter::add_bool(const std::string& key, bool v) {
  add_raw(key, GgufType::BOOL, {static_cast<uint8_t>(v ? 1 : 0)});
}
void GgufWriter::add_string(const std::string& key, const std::string& v) {
  std::vector<uint8_t> b;
  put_string(b, v);
  add_raw(key, GgufType::STRING, b);
}
void GgufWriter::add_string_array(const std::string& key, const std::vector<std::string>& v) {
  std::vector<uint8_t> b;
  put<uint32_t>(b, static_cast<uint32_t>(GgufType::STRING));
  put<uint64_t>(b, v.size());
  for (const auto& s : v) put_string(b, s);
  add_raw(key, GgufType::ARRAY, b);
}
void GgufWriter::add_i32_array(const std::string& key, const std::vector<int32_t>& v) {
  std::vector<uint8_t> b;
  put<uint32_t>(b, static_cast<uint32_t>(GgufType::INT32));
  put<uint64_t>(b, v.size());
  for (int32_t x : v) put(b, x);
  add_raw(key, GgufType::ARRAY, b);
}
void GgufWriter::add_f32_array(const std::string& key, const std::vector<float>& v) {
  std::vector<uint8_t> b;
  put<uint32_t>(b, static_cast<uint32_t>(GgufType::FLOAT32));
  put<uint64_t>(b, v.size());
  for (float x : v) put(b, x);
  add_raw(key, GgufType::ARRAY, b);
}

void GgufWriter::add_tensor(const std::string& name, GgmlType type, const std::vector<uint64_t>& ne,
                            std::vector<uint8_t> data) {
  uint64_t rows = 1;
  for (size_t i = 1; i < ne.size(); ++i) rows *= ne[i];
  const size_t want = ggml_row_bytes(type, ne.at(0)) * rows;
  if (data.size() != want)
    throw FormatError("GgufWriter: tensor '" + name + "' has " + std::to_string(data.size()) + " bytes, shape needs " +
                      std::to_string(want));
  tensors_.push_back({name, type, ne, std::move(data)});
}

std::vector<uint8_t> GgufWriter::serialize() const {
  std::vector<uint8_t> out;
  append(out, "GGUF", 4);
  put<uint32_t>(out, 3);
  put<uint64_t>(out, tensors_.size());
  put<uint64_t>(out, n_kv_ + (alignment_ != 32 ? 1 : 0));
  append(out, kv_bytes_.data(), kv_bytes_.size());
  if (alignment_ != 32) {
    put_string(out, "general.alignment");
    put<uint32_t>(out, static_cast<uint32_t>(GgufType::UINT32));
    put<uint32_t>(out, alignment_);
  }
  uint64_t offset = 0;
  std::vector<uint64_t> offsets;
  for (const auto& t : tensors_) {
    put_string(out, t.name);
    put<uint32_t>(out, static_cast<uint32_t>(t.ne.size()));
    for (uint64_t d : t.ne) put<uint64_t>(out, d);
    put<uint32_t>(out, static_cast<uint32_t>(t.type));
    put<uint64_t>(out, offset);
    offsets.push_back(offset);
    offset += (t.data.size() + alignment_ - 1) / alignment_ * alignment_;
  }
  out.resize((out.size() + alignment_ - 1) / alignment_ * alignment_, 0);
  const size_t data_start = out.size();
  out.resize(data_start + offset, 0);
  for (size_t i = 0; i < tensors_.size(); ++i) {
    std::memcpy(out.data() + data_start + offsets[i], tensors_[i].data.data(), tensors_[i].data.size());
  }
  return out;
}

void GgufWriter::write(const std::string& path) const {
  const std::vector<uint8_t> bytes = serialize();
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!f) throw FormatError("cannot write '" + path + "'");
}

std::vector<uint8_t> quantize_q8_0(const float* x, size_t n) {
  if (n % 32 != 0) throw FormatError("quantize_q8_0: n must be a multiple of 32");
  std::vector<uint8_t> out(n / 32 * sizeof(BlockQ8_0));
  for (size_t b = 0; b < n / 32; ++b) {
    float amax = 0;
    for (int i = 0; i < 32; ++i) amax = std::fmax(amax, std::fabs(x[b * 32 + i]));
    const float d = amax / 127.0f;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    BlockQ8_0 blk;
    blk.d = fp32_to_fp16(d);
    for (int i = 0; i < 32; ++i) blk.qs[i] = static_cast<int8_t>(std::lround(x[b * 32 + i] * id));
    std::memcpy(out.data() + b * sizeof(BlockQ8_0), &blk, sizeof(blk));
  }
  return out;
}

}  // namespace ds
