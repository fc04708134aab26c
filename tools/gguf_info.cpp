// deltaserve-gguf-info FILE: prints GGUF metadata (long arrays abbreviated), the tensor table
// and the parsed model config. Exits non-zero with a message on a bad file.
#include <cstdio>
#include <exception>
#include <string>

#include "common/gguf.h"
#include "common/model_config.h"

namespace {

constexpr uint64_t kArrayPreview = 8;

std::string quote(std::string_view s, size_t max_len = 120) {
  std::string out = "\"";
  for (size_t i = 0; i < s.size() && i < max_len; ++i) {
    const char ch = s[i];
    if (ch == '\n')
      out += "\\n";
    else if (ch == '"')
      out += "\\\"";
    else
      out += ch;
  }
  if (s.size() > max_len) out += "...(" + std::to_string(s.size()) + " bytes)";
  return out + "\"";
}

std::string scalar_string(const ds::GgufValue& v) {
  switch (v.type) {
    case ds::GgufType::STRING:
      return quote(v.str);
    case ds::GgufType::BOOL:
      return v.u64 ? "true" : "false";
    case ds::GgufType::FLOAT32:
    case ds::GgufType::FLOAT64: {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.9g", v.f64);
      return buf;
    }
    default:
      return v.is_integer() && (v.type == ds::GgufType::INT8 || v.type == ds::GgufType::INT16 ||
                                v.type == ds::GgufType::INT32 || v.type == ds::GgufType::INT64)
                 ? std::to_string(v.i64)
                 : std::to_string(v.u64);
  }
}

std::string value_string(const ds::GgufValue& v) {
  if (!v.is_array()) return scalar_string(v);
  std::string s = "[";
  const uint64_t n = v.count < kArrayPreview ? v.count : kArrayPreview;
  for (uint64_t i = 0; i < n; ++i) {
    if (i) s += ", ";
    if (v.elem_type == ds::GgufType::STRING) {
      s += quote(v.strings[i], 40);
    } else if (v.elem_type == ds::GgufType::FLOAT32 || v.elem_type == ds::GgufType::FLOAT64) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.9g", ds::gguf_array_f64(v, i));
      s += buf;
    } else {
      s += std::to_string(ds::gguf_array_i64(v, i));
    }
  }
  if (v.count > n) s += ", ... (" + std::to_string(v.count) + " items)";
  return s + "]";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2 || std::string(argv[1]) == "--help") {
    std::fprintf(stderr, "usage: deltaserve-gguf-info FILE.gguf\n");
    return 2;
  }
  try {
    const ds::GgufFile g = ds::GgufFile::open(argv[1]);
    std::printf("file: %s\nGGUF version %u, alignment %u, data offset %llu, %zu metadata keys, %zu tensors\n\n",
                argv[1], g.version(), g.alignment(), static_cast<unsigned long long>(g.data_offset()),
                g.metadata().size(), g.tensors().size());
    std::printf("== metadata\n");
    for (const auto& [k, v] : g.metadata())
      std::printf("%-48s %-22s %s\n", k.c_str(), v.type_string().c_str(), value_string(v).c_str());
    std::printf("\n== tensors\n%-5s %-40s %-6s %-22s %s\n", "#", "name", "type", "dims", "bytes");
    size_t i = 0;
    for (const auto& t : g.tensors()) {
      std::printf("%-5zu %-40s %-6s %-22s %llu\n", i++, t.name.c_str(), ds::ggml_type_name(t.type),
                  t.shape_string().c_str(), static_cast<unsigned long long>(t.nbytes));
    }
    std::printf("\n== model config\n");
    const ds::ModelConfig cfg = ds::load_model_config(g);
    std::printf("%s", cfg.describe().c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "deltaserve-gguf-info: %s\n", e.what());
    return 1;
  }
  return 0;
}
