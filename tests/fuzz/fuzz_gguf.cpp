// libFuzzer entry point for the GGUF reader: any input must either parse (with every tensor
// inside the buffer) or throw FormatError/ConfigError. Anything else is a bug.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "common/error.h"
#include "common/gguf.h"
#include "common/model_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    ds::GgufFile g = ds::GgufFile::from_bytes(std::vector<uint8_t>(data, data + size));
    for (const auto& t : g.tensors()) {
      if (t.offset + t.nbytes + g.data_offset() > g.file_size()) std::abort();
    }
    try {
      (void)ds::load_model_config(g);
    } catch (const ds::ConfigError&) {
    } catch (const ds::FormatError&) {
    }
  } catch (const ds::FormatError&) {
  }
  return 0;
}
