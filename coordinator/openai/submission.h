// Handing a parsed generation request to the engine: one engine request per choice, each with
// its Responder. With n > 1 the choices share the prompt's prefill: choice 0 goes first, and the
// others are submitted once it has started (its prompt's KV blocks and GDN snapshot are then in
// the prefix cache, so each of them computes only the prompt's last partial block); a
// ChoiceFanIn merges their replies. Choice i > 0 samples with a seed derived from (seed, i).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "coordinator/http/http_types.h"
#include "coordinator/http/metrics.h"
#include "coordinator/openai/responder.h"
#include "coordinator/openai/task_thread.h"
#include "coordinator/output_parser/output_parser.h"
#include "coordinator/serving/generation.h"
#include "coordinator/tokenizer/tokenizer.h"

namespace ds::openai {

struct Submission {
  GenerationRequest request;
  ResponderConfig config;
  std::optional<OutputParserOptions> parser;
  std::vector<std::string> stop;
  std::string echo;  // completions: text output before the generated text
  uint32_t n = 1;    // choices
};

// The seed of choice `index` (choice 0 keeps the request's).
uint64_t choice_seed(uint64_t seed, uint32_t index);

// Submits every choice (ApiError when the engine refuses the first); returns what cancels them.
DisconnectHook submit(Engine& engine, const std::shared_ptr<TaskThread>& deferred, const Tokenizer& tokenizer,
                      ServerMetrics& metrics, Submission s, std::shared_ptr<ResponseChannel> channel);

}  // namespace ds::openai
