// One served model in the coordinator: its GGUF's metadata (config, tokenizer, chat template),
// its workers (PipelineEngine) and its continuous-batching engine (BatchEngine). `deltaserve
// serve` runs one per model: the main one, and the embedding / reranker models beside it.
#pragma once

#include <memory>
#include <string>

#include "common/gguf.h"
#include "common/model_config.h"
#include "coordinator/app/serve_options.h"
#include "coordinator/chat_template/chat_template.h"
#include "coordinator/engine/engine.h"
#include "coordinator/openai/openai_server.h"
#include "coordinator/serving/batch_engine.h"
#include "coordinator/tokenizer/tokenizer.h"

namespace ds {

class ModelHost {
 public:
  // Reads the GGUF's metadata and settles what `options` leaves open: the mode (--mode, else
  // the GGUF's pooling type) and the head the workers run, the context, the served name.
  // Throws std::runtime_error for a mode the model cannot serve, or KV cache types its heads
  // cannot be stored as.
  explicit ModelHost(ServeOptions options);
  ~ModelHost();  // stop()
  ModelHost(const ModelHost&) = delete;
  ModelHost& operator=(const ModelHost&) = delete;

  // Starts the workers (waits until all are Ready), then the engine.
  void start();
  // Stops the engine (cancelling what runs), then the workers; idempotent.
  void stop();

  const ServeOptions& options() const { return o_; }
  // For run_http_server; valid after start().
  ServedModel served();

 private:
  ServeOptions o_;
  GgufFile gguf_;
  ModelConfig cfg_;
  Tokenizer tokenizer_;
  ChatTemplate chat_template_;
  uint64_t kv_token_bytes_ = 0;  // one token's K + V over every attention layer, as the workers store them
  std::unique_ptr<PipelineEngine> pipeline_;
  std::unique_ptr<BatchEngine> engine_;
};

// The options of a model served beside `main` (--embed-model, --rerank-model): the main
// model's numerics, memory and HTTP settings, its own GGUF, workers, devices and name, mode
// `mode`; it never speculates, and its workers are always this coordinator's own.
ServeOptions side_model_options(const ServeOptions& main, const SideModelOptions& side, const std::string& mode);

}  // namespace ds
