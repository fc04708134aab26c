// A small synthetic qwen35 model for CUDA model-level tests: the 0.8B layer dimensions with 4
// layers (3 GDN + 1 attention), a 4096-token vocabulary and no MTP block, so the CPU side of a
// comparison stays quick. Written to a temporary GGUF, mapped, and unlinked at once (the mapping
// stays valid after the name goes).
#pragma once

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

#include "common/gguf.h"
#include "common/model_config.h"
#include "tools/synth/generate.h"
#include "tools/synth/shapes.h"

namespace ds::test {

struct SynthModel {
  std::shared_ptr<const GgufFile> gguf;
  ModelConfig config;
};

// `tag` keeps concurrent test binaries' temporary files apart; `seed` picks the weights.
inline SynthModel make_small_synth_model(const std::string& tag, uint64_t seed) {
  synth::SynthShape shape = synth::shape_by_name("0.8b");
  shape.n_layer = 4;
  shape.n_vocab = 4096;
  shape.n_nextn = 0;
  const std::string path =
      (std::filesystem::temp_directory_path() / ("ds_" + tag + "_synth_" + std::to_string(::getpid()) + ".gguf"))
          .string();
  synth::write_synth_gguf(shape, path, seed, 0);
  SynthModel m;
  m.gguf = std::make_shared<const GgufFile>(GgufFile::open(path));
  std::filesystem::remove(path);
  m.config = load_model_config(*m.gguf);
  return m;
}

}  // namespace ds::test
