// Helpers shared by tests: locating decompressed test data and reading raw arrays.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ds::test {

// Absolute path of a file under the decompressed test-data directory.
std::string data_path(const std::string& rel);
// Path of the tiny Qwen3.5 fixture GGUF.
std::string tiny_model_path();
std::vector<uint8_t> read_file(const std::string& path);
std::vector<float> read_f32(const std::string& path);

}  // namespace ds::test
