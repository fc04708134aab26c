// Shared pieces of the multi-process tests: the fixture prompts, the in-process reference
// forward and engine options that spawn the freshly built deltaserve-worker.
#pragma once

#include <memory>
#include <random>
#include <vector>

#include "common/gguf.h"
#include "common/model_config.h"
#include "coordinator/engine/engine.h"
#include "tests/testutil/testutil.h"
#include "worker/stage_model.h"

namespace ds::test {

// The chat prompt of the fixture manifest (19 tokens).
inline std::vector<int32_t> chat_prompt() {
  return {151644, 872, 198,    9707, 0,      3555,  374, 279,    6722, 315,
          11862,  30,  151645, 198,  151644, 77091, 198, 151667, 198};
}

// A random prompt of n ids drawn from the whole vocabulary (fixed seed).
inline std::vector<int32_t> random_prompt(size_t n, uint32_t n_vocab, uint32_t seed = 200) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> id(0, static_cast<int32_t>(n_vocab) - 1);
  std::vector<int32_t> out(n);
  for (int32_t& t : out) t = id(rng);
  return out;
}

struct InProcessModel {
  std::shared_ptr<const GgufFile> gguf;
  ModelConfig config;
  std::unique_ptr<StageModel> stage;

  explicit InProcessModel(StageRange range = {0, 0}) {
    gguf = std::make_shared<const GgufFile>(GgufFile::open(tiny_model_path()));
    config = load_model_config(*gguf);
    if (range.last_layer == 0) range = StageRange{0, config.n_layer};
    StageOptions options;
    options.n_threads = 1;
    stage = load_cpu_stage(gguf, config, range, options);
  }
};

inline EngineOptions engine_options(uint32_t n_workers) {
  EngineOptions o;
  o.model_path = tiny_model_path();
  o.n_workers = n_workers;
  o.worker_binary = std::string(DS_BIN_DIR) + "/deltaserve-worker";
  o.startup_timeout_ms = 30000;
  o.step_timeout_ms = 30000;
  return o;
}

}  // namespace ds::test
