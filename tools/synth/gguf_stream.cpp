#include "tools/synth/gguf_stream.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/error.h"
#include "common/gguf.h"

namespace ds::synth {
namespace {

template <typename T>
void put(std::vector<uint8_t>& out, T v) {
  const size_t at = out.size();
  out.resize(at + sizeof(T));
  std::memcpy(out.data() + at, &v, sizeof(T));
}

void put_string(std::vector<uint8_t>& out, std::string_view s) {
  put<uint64_t>(out, s.size());
  out.insert(out.end(), s.begin(), s.end());
}

// Bytes of one element of a non-string scalar type (GGUF v3 encodes them little-endian).
size_t scalar_bytes(GgufType t) {
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
      throw FormatError(std::string("GgufStreamWriter: no scalar size for type ") + gguf_type_name(t));
  }
}

// A scalar GgufValue in its own type's encoding (the reader widened it to u64 / i64 / f64).
void put_scalar(std::vector<uint8_t>& out, const GgufValue& v) {
  switch (v.type) {
    case GgufType::UINT8:
    case GgufType::BOOL:
      put(out, static_cast<uint8_t>(v.u64));
      break;
    case GgufType::INT8:
      put(out, static_cast<int8_t>(v.i64));
      break;
    case GgufType::UINT16:
      put(out, static_cast<uint16_t>(v.u64));
      break;
    case GgufType::INT16:
      put(out, static_cast<int16_t>(v.i64));
      break;
    case GgufType::UINT32:
      put(out, static_cast<uint32_t>(v.u64));
      break;
    case GgufType::INT32:
      put(out, static_cast<int32_t>(v.i64));
      break;
    case GgufType::UINT64:
      put(out, v.u64);
      break;
    case GgufType::INT64:
      put(out, v.i64);
      break;
    case GgufType::FLOAT32:
      put(out, static_cast<float>(v.f64));
      break;
    case GgufType::FLOAT64:
      put(out, v.f64);
      break;
    case GgufType::STRING:
      put_string(out, v.str);
      break;
    default:
      throw FormatError("GgufStreamWriter: cannot encode a value of type " + v.type_string());
  }
}

uint64_t align_up(uint64_t x, uint64_t a) {
  return (x + a - 1) / a * a;
}

std::string errno_text() {
  return std::strerror(errno);
}

}  // namespace

uint64_t StreamTensor::n_rows() const {
  uint64_t rows = 1;
  for (size_t i = 1; i < ne.size(); ++i) rows *= ne[i];
  return rows;
}

GgufStreamWriter::~GgufStreamWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void GgufStreamWriter::add_u32(const std::string& key, uint32_t v) {
  put_string(kv_bytes_, key);
  put<uint32_t>(kv_bytes_, static_cast<uint32_t>(GgufType::UINT32));
  put(kv_bytes_, v);
  ++n_kv_;
}

void GgufStreamWriter::add_f32(const std::string& key, float v) {
  put_string(kv_bytes_, key);
  put<uint32_t>(kv_bytes_, static_cast<uint32_t>(GgufType::FLOAT32));
  put(kv_bytes_, v);
  ++n_kv_;
}

void GgufStreamWriter::add_string(const std::string& key, const std::string& v) {
  put_string(kv_bytes_, key);
  put<uint32_t>(kv_bytes_, static_cast<uint32_t>(GgufType::STRING));
  put_string(kv_bytes_, v);
  ++n_kv_;
}

void GgufStreamWriter::add_i32_array(const std::string& key, const std::vector<int32_t>& v) {
  put_string(kv_bytes_, key);
  put<uint32_t>(kv_bytes_, static_cast<uint32_t>(GgufType::ARRAY));
  put<uint32_t>(kv_bytes_, static_cast<uint32_t>(GgufType::INT32));
  put<uint64_t>(kv_bytes_, v.size());
  for (int32_t x : v) put(kv_bytes_, x);
  ++n_kv_;
}

void GgufStreamWriter::add_f32_array(const std::string& key, const std::vector<float>& v) {
  put_string(kv_bytes_, key);
  put<uint32_t>(kv_bytes_, static_cast<uint32_t>(GgufType::ARRAY));
  put<uint32_t>(kv_bytes_, static_cast<uint32_t>(GgufType::FLOAT32));
  put<uint64_t>(kv_bytes_, v.size());
  for (float x : v) put(kv_bytes_, x);
  ++n_kv_;
}

void GgufStreamWriter::add_bool(const std::string& key, bool v) {
  put_string(kv_bytes_, key);
  put<uint32_t>(kv_bytes_, static_cast<uint32_t>(GgufType::BOOL));
  put<uint8_t>(kv_bytes_, v ? 1 : 0);
  ++n_kv_;
}

void GgufStreamWriter::add_string_array(const std::string& key, const std::vector<std::string_view>& v) {
  put_string(kv_bytes_, key);
  put<uint32_t>(kv_bytes_, static_cast<uint32_t>(GgufType::ARRAY));
  put<uint32_t>(kv_bytes_, static_cast<uint32_t>(GgufType::STRING));
  put<uint64_t>(kv_bytes_, v.size());
  for (std::string_view s : v) put_string(kv_bytes_, s);
  ++n_kv_;
}

void GgufStreamWriter::add_value(const std::string& key, const GgufValue& v) {
  std::vector<uint8_t> body;
  put<uint32_t>(body, static_cast<uint32_t>(v.type));
  if (v.type != GgufType::ARRAY) {
    put_scalar(body, v);
  } else {
    put<uint32_t>(body, static_cast<uint32_t>(v.elem_type));
    put<uint64_t>(body, v.count);
    if (v.elem_type == GgufType::STRING) {
      for (std::string_view s : v.strings) put_string(body, s);
    } else {  // raw little-endian elements, exactly as they were read
      body.insert(body.end(), v.array_data, v.array_data + v.count * scalar_bytes(v.elem_type));
    }
  }
  put_string(kv_bytes_, key);  // only after the value encoded: a failure leaves no half key
  kv_bytes_.insert(kv_bytes_.end(), body.begin(), body.end());
  ++n_kv_;
}

size_t GgufStreamWriter::add_tensor(const std::string& name, GgmlType type, const std::vector<uint64_t>& ne) {
  if (fd_ >= 0) throw FormatError("GgufStreamWriter: tensor '" + name + "' declared after open()");
  if (ne.empty() || ne.size() > 4) throw FormatError("GgufStreamWriter: tensor '" + name + "' needs 1 to 4 dims");
  StreamTensor t{name, type, ne, 0, data_bytes_};
  t.nbytes = t.row_bytes() * t.n_rows();  // ggml_row_bytes throws unless ne0 fits the block size
  data_bytes_ = align_up(data_bytes_ + t.nbytes, kAlignment);
  tensors_.push_back(std::move(t));
  return tensors_.size() - 1;
}

std::vector<uint8_t> GgufStreamWriter::header() const {
  std::vector<uint8_t> out{'G', 'G', 'U', 'F'};
  put<uint32_t>(out, 3);
  put<uint64_t>(out, tensors_.size());
  put<uint64_t>(out, n_kv_);
  out.insert(out.end(), kv_bytes_.begin(), kv_bytes_.end());
  for (const StreamTensor& t : tensors_) {
    put_string(out, t.name);
    put<uint32_t>(out, static_cast<uint32_t>(t.ne.size()));
    for (uint64_t d : t.ne) put<uint64_t>(out, d);
    put<uint32_t>(out, static_cast<uint32_t>(t.type));
    put<uint64_t>(out, t.offset);
  }
  out.resize(align_up(out.size(), kAlignment), 0);
  return out;
}

void GgufStreamWriter::open(const std::string& path) {
  const std::vector<uint8_t> head = header();
  data_start_ = head.size();
  path_ = path;
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) throw FormatError("cannot create '" + path + "': " + errno_text());
  // Sizing first makes the padding between tensors zeros without writing it.
  if (::ftruncate(fd_, static_cast<off_t>(data_start_ + data_bytes_)) != 0) {
    throw FormatError("cannot size '" + path + "': " + errno_text());
  }
  write_tensor_bytes(SIZE_MAX, 0, head.data(), head.size());
}

void GgufStreamWriter::write_tensor_bytes(size_t index, uint64_t at, const void* data, size_t n) const {
  uint64_t pos = at;  // index SIZE_MAX: the header itself, at file offset `at`
  if (index != SIZE_MAX) {
    const StreamTensor& t = tensors_.at(index);
    if (at + n > t.nbytes) throw FormatError("GgufStreamWriter: write past the end of '" + t.name + "'");
    pos = data_start_ + t.offset + at;
  }
  const auto* p = static_cast<const uint8_t*>(data);
  while (n > 0) {  // pwrite may write less than asked (signals, huge requests)
    const ssize_t w = ::pwrite(fd_, p, n, static_cast<off_t>(pos));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) throw FormatError("cannot write '" + path_ + "': " + errno_text());
    p += w;
    pos += static_cast<uint64_t>(w);
    n -= static_cast<size_t>(w);
  }
}

void GgufStreamWriter::close() {
  if (fd_ < 0) return;
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) throw FormatError("cannot close '" + path_ + "': " + errno_text());
}

}  // namespace ds::synth
