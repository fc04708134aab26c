// Every model architecture a worker runs: GGUF `general.architecture` -> its stage loader.
// Adding an architecture is one model file in worker/models/ (built from worker/blocks/) plus
// one line in registry.cpp. What a stage of any architecture reads and keeps per sequence
// (tensor ownership, state shapes) is derived from ModelConfig in common/stage_footprint.h, so
// the coordinator's layout planner, the workers' pool sizing and the bench agree; an
// architecture whose tensors or state do not follow that convention says so there.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "worker/stage_model.h"

namespace ds {

class Backend;
class GgufFile;
struct ModelConfig;

using StageLoaderFn = std::unique_ptr<StageModel> (*)(std::shared_ptr<const GgufFile> gguf, const ModelConfig& config,
                                                      StageRange range, const StageOptions& options,
                                                      std::unique_ptr<Backend> backend);

struct ModelArch {
  const char* name;  // general.architecture
  StageLoaderFn load;
};

// The architecture's entry, or null.
const ModelArch* find_model_arch(const std::string& name);
// Names of every registered architecture, for error messages.
std::vector<std::string> model_arch_names();

}  // namespace ds
