// The contract between the request layer (HTTP / OpenAI) and the engine that generates
// tokens. The request layer tokenizes, renders templates and parses output; the engine only
// sees token ids and sampling parameters, and reports tokens back through a sink. Both the
// one-request-at-a-time engine and the continuous-batching scheduler implement `Engine`.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/image_patches.h"  // RgbImage
#include "common/image_span.h"     // ImageSpan

namespace ds {

namespace structured {
class Grammar;
class TokenVocab;
}  // namespace structured

// Structured outputs: the generated tokens must spell a string of `grammar` (then end), token
// by token. With `starts_after` >= 0 the tokens up to and including that one (the reasoning
// block's `</think>`) are free and the grammar applies from the next token on.
struct OutputConstraint {
  std::shared_ptr<const structured::Grammar> grammar;
  std::shared_ptr<const structured::TokenVocab> vocab;
  int32_t starts_after = -1;
};

struct SamplingParams {
  float temperature = 1.0f;      // 0: greedy
  float top_p = 1.0f;            // nucleus mass in (0, 1]
  int32_t top_k = 0;             // 0: no top-k filter
  std::optional<uint64_t> seed;  // fixed seed: reproducible sampling
  uint32_t max_tokens = 256;     // generated-token budget (the engine also stops at the context limit)
  float min_p = 0.0f;            // 0..1: drops tokens below min_p x the top token's probability (after temperature)
  // Logit adjustments, applied before temperature, in this order (see common/logit_adjust.h):
  float repetition_penalty = 1.0f;  // > 0, over prompt + generated ids: positive logits / it, negative x it
  float frequency_penalty = 0.0f;   // -2..2: minus it x the id's count among the generated tokens
  float presence_penalty = 0.0f;    // -2..2: minus it once for an id among the generated tokens
  bool penalizes() const { return repetition_penalty != 1.0f || frequency_penalty != 0.0f || presence_penalty != 0.0f; }
  std::vector<std::pair<int32_t, float>> logit_bias;  // id -> -100..100 added to its logit; ids sorted, unique
  uint32_t min_tokens = 0;  // the end-of-generation ids and stop_token_ids are masked until this many were generated
  bool ignore_eos = false;
  std::vector<int32_t> stop_token_ids;  // in addition to the model's end-of-generation set
  uint32_t top_logprobs = 0;            // 0..16 alternatives to report per token
  bool logprobs = false;
  // The logprob (and top_logprobs alternatives) of every prompt token after the first, reported
  // once through GenerationSink::on_prompt_logprobs before on_started. Such a request computes
  // its whole prompt (no prefix-cache hit) and does not speculate.
  bool prompt_logprobs = false;
};

// One image of a prompt: where its tokens sit (prompt_ids holds the image token id at each of
// its positions) and its pixels at their final size, which the engine sends to stage 0 with the
// steps that compute those positions.
struct PromptImage {
  ImageSpan span;
  std::shared_ptr<const RgbImage> pixels;
};

struct GenerationRequest {
  std::string request_id;
  std::vector<int32_t> prompt_ids;
  std::vector<PromptImage> images;  // vision input, in position order (empty: text only)
  SamplingParams sampling;
  std::optional<OutputConstraint> constraint;
  // Pooling models (embedding, reranker): the prompt is computed and its last position's pooled
  // output comes back through GenerationSink::on_pooled, then the request finishes as a stop;
  // nothing is generated (sampling is ignored).
  bool pooled = false;
};

enum class FinishReason { kStop, kLength, kCancelled, kError };
const char* finish_reason_name(FinishReason r);  // "stop", "length", "cancelled", "error"

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0;
};

struct GeneratedToken {
  int32_t token = 0;
  float logprob = 0;                       // of the chosen token
  std::vector<TokenLogprob> top_logprobs;  // best first
};

// Speculative-decoding counters (of one request, or of the scheduler since start).
struct SpecCounts {
  uint64_t drafted = 0;   // drafts sent for verification
  uint64_t accepted = 0;  // of those, accepted
  uint64_t steps = 0;     // verify rows (rows with at least one draft)
  // Tokens emitted per verify row: accepted drafts + the correction or bonus token.
  double mean_accepted_length() const {
    return steps == 0 ? 0.0 : 1.0 + static_cast<double>(accepted) / static_cast<double>(steps);
  }
};

// Receives a request's progress. Called from the engine's thread; implementations must be
// quick and thread-safe (e.g. post to the connection's executor).
class GenerationSink {
 public:
  virtual ~GenerationSink() = default;
  // The prompt was processed (time to first token is measured here by the caller if wanted).
  virtual void on_started(uint32_t prompt_tokens) = 0;
  virtual void on_token(const GeneratedToken& token) = 0;
  // Last call for the request. `error` is set for kError.
  virtual void on_finished(FinishReason reason, const std::string& error) = 0;
  // Prompt tokens reused from the prefix cache (not recomputed); called at most once, before
  // on_finished, by engines that have a prefix cache.
  virtual void on_cached(uint32_t cached_tokens) { (void)cached_tokens; }
  // Speculative decoding of the request (engines with --spec-k > 0), at most once, before
  // on_finished.
  virtual void on_speculation(const SpecCounts& counts) { (void)counts; }
  // SamplingParams::prompt_logprobs: prompt tokens 1..n-1 (the first has no logprob), in order;
  // at most once, before on_started.
  virtual void on_prompt_logprobs(const std::vector<GeneratedToken>& tokens) { (void)tokens; }
  // GenerationRequest::pooled: the model's pooled output of the last prompt position (the final
  // hidden state of an embedding model, the classifier logits of a reranker), once, before
  // on_finished.
  virtual void on_pooled(const std::vector<float>& values) { (void)values; }
};

struct EngineHealth {
  bool ready = false;  // every worker Ready
  uint32_t workers_total = 0;
  uint32_t workers_ready = 0;
  uint64_t worker_restarts = 0;
  uint32_t queue_depth = 0;                  // requests waiting
  uint32_t running = 0;                      // requests generating
  uint32_t max_context = 0;                  // tokens per sequence
  uint64_t prefix_cache_queried_tokens = 0;  // prompt tokens looked up in the prefix cache
  uint64_t prefix_cache_hit_tokens = 0;      // of those, reused (not recomputed)
  uint32_t kv_blocks_total = 0;              // KV blocks the workers hold
  uint32_t kv_blocks_used = 0;               // held by live sequences (cached-but-idle blocks count as free)
  uint32_t kv_block_size = 0;                // tokens per KV block
  std::string kv_cache_type = "f32";         // the workers' KV element types: "q8_0", "K q8_0, V f16"
  uint64_t kv_bytes_per_token = 0;           // one token's K + V over every attention layer, as stored
  uint32_t slots_total = 0;                  // GDN state slots
  uint32_t slots_used = 0;
  uint64_t preemptions = 0;  // sequences preempted (recomputed later) since start
  SpecCounts spec = {};      // speculative decoding since start (all zero when off)
  // Where the engine loop's time goes while it serves (since start): steps collected, time in
  // the coordinator planning them and delivering their tokens, and time waiting for results.
  // A large host share means the workers idle between steps (with one plan in flight).
  uint64_t steps = 0;
  double step_host_seconds = 0;
  double step_wait_seconds = 0;
};

class Engine {
 public:
  virtual ~Engine() = default;
  // Queues a request. Throws ds::RequestError-like std::invalid_argument for requests the
  // engine can never serve (e.g. prompt longer than the context), before any callback.
  virtual void submit(GenerationRequest request, std::shared_ptr<GenerationSink> sink) = 0;
  // Stops a request early (client went away); its sink gets on_finished(kCancelled).
  virtual void cancel(const std::string& request_id) = 0;
  virtual EngineHealth health() const = 0;
};

}  // namespace ds
