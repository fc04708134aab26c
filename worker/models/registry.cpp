#include "worker/models/registry.h"

#include "common/error.h"
#include "common/kv_options.h"  // kv_types_problem
#include "common/model_config.h"
#include "worker/backend.h"
#include "worker/models/qwen3.h"
#include "worker/models/qwen35.h"
#include "worker/models/qwen35moe.h"

namespace ds {

namespace {

constexpr ModelArch kArchs[] = {
    {"qwen35", &load_qwen35_stage},
    {"qwen35moe", &load_qwen35moe_stage},
    {"qwen3", &load_qwen3_stage},
};

}  // namespace

const ModelArch* find_model_arch(const std::string& name) {
  for (const ModelArch& a : kArchs) {
    if (name == a.name) return &a;
  }
  return nullptr;
}

std::vector<std::string> model_arch_names() {
  std::vector<std::string> out;
  for (const ModelArch& a : kArchs) out.emplace_back(a.name);
  return out;
}

std::unique_ptr<StageModel> load_stage(std::shared_ptr<const GgufFile> gguf, const ModelConfig& config,
                                       StageRange range, const StageOptions& options,
                                       std::unique_ptr<Backend> backend) {
  const ModelArch* arch = find_model_arch(config.arch);
  if (arch == nullptr) {
    std::string known;
    for (const std::string& n : model_arch_names()) known += (known.empty() ? "" : ", ") + n;
    throw ConfigError("load_stage: no worker model for architecture '" + config.arch + "' (this build runs: " + known +
                      ")");
  }
  // Every architecture serves the LM head; the others only where the model says so (qwen35
  // has no embedding or classifier mode: its last stage always ends in the LM head and MTP).
  if (const std::string why = output_head_problem(config, options.head); !why.empty()) {
    throw ConfigError("load_stage: " + why);
  }
  if (const std::string why = kv_types_problem(options.cache.k_type, options.cache.v_type, config); !why.empty()) {
    throw ConfigError("load_stage: " + why);
  }
  return arch->load(std::move(gguf), config, range, options, std::move(backend));
}

std::unique_ptr<StageModel> load_cpu_stage(std::shared_ptr<const GgufFile> gguf, const ModelConfig& config,
                                           StageRange range, const StageOptions& options) {
  return load_stage(std::move(gguf), config, range, options, make_cpu_backend(options.n_threads));
}

}  // namespace ds
