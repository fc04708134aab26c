// Scheduler-side state of one request. One rule covers prefill and decode: a step
// computes tokens [num_computed, end) with end <= tokens.size().
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "coordinator/scheduler/step_plan.h"
#include "coordinator/serving/generation.h"

namespace ds {

struct Sequence {
  uint64_t uid = 0;  // unique per admission to the scheduler (request ids may be reused)
  std::string request_id;
  std::vector<int32_t> tokens;  // prompt + generated
  // Vision input: the prompt's images, and the ids the prefix cache keys blocks by (empty without
  // images, else `tokens` with each image position replaced by an id derived from the image's
  // hash and the position's index in it, so only the same image hits).
  std::vector<ImageSpan> images;
  std::vector<int32_t> key_tokens;
  uint32_t prompt_len = 0;
  SamplingParams sampling;

  uint32_t num_computed = 0;                    // tokens whose KV / GDN state the workers hold
  std::vector<uint32_t> blocks;                 // KV block table
  uint32_t blocks_sent = 0;                     // prefix of `blocks` the workers already know
  uint32_t published_blocks = 0;                // prefix of `blocks` offered to the prefix cache
  std::vector<uint64_t> hashes;                 // chained hash per full block of `tokens`
  std::optional<uint32_t> slot;                 // GDN state slot while running
  bool sent_to_workers = false;                 // false: the next row is is_new
  std::optional<uint32_t> load_snapshot;        // for the first row after admission
  uint32_t snapshot_target = 0;                 // position to snapshot at (0: none)
  std::optional<uint64_t> decode_snapshot_key;  // latest snapshot taken while generating
  uint32_t cached_tokens = 0;
  uint32_t num_preemptions = 0;
  // Speculative decoding: drafts proposed by the last step (they follow tokens.back()), how
  // many of them the row in flight verifies, and whether the workers computed past
  // num_computed (rejected drafts) so the next row must roll back.
  std::vector<int32_t> drafts;
  uint32_t verifying = 0;
  bool rewind = false;
  SpecCounts spec;

  const std::vector<int32_t>& cache_tokens() const { return key_tokens.empty() ? tokens : key_tokens; }
  uint32_t num_tokens() const { return static_cast<uint32_t>(tokens.size()); }
  uint32_t generated() const { return num_tokens() - prompt_len; }
  uint32_t remaining() const { return num_tokens() - num_computed; }
};

}  // namespace ds
