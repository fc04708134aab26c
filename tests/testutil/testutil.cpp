#include "tests/testutil/testutil.h"

#include <cstring>
#include <fstream>
#include <iterator>
#include <stdexcept>

namespace ds::test {

std::string data_path(const std::string& rel) {
  return std::string(DS_TESTDATA_DIR) + "/" + rel;
}

std::string tiny_model_path() {
  return data_path("tiny-qwen35-q8_0.gguf");
}

std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open test data " + path);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

std::vector<float> read_f32(const std::string& path) {
  std::vector<uint8_t> bytes = read_file(path);
  if (bytes.size() % 4 != 0) throw std::runtime_error(path + ": size is not a multiple of 4");
  std::vector<float> out(bytes.size() / 4);
  std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

}  // namespace ds::test
