// Types both processes use to describe a pipeline stage and its memory: the coordinator plans
// with them (layout, capacity, the scheduler's placements) and sends them to the workers, which
// build their pools from them. Nothing here depends on a backend or a model file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/kv_format.h"

namespace ds {

// Where the scheduler placed one sequence of a step (managed memory). Order of operations in
// a step: set up every is_new row's slot (zero, or load_snapshot), compute, then save.
struct SeqCache {
  uint32_t state_slot = 0;                // GDN state slot (< max_seqs)
  bool is_new = false;                    // first step of this placement: block_ids is the whole table
  std::optional<uint32_t> load_snapshot;  // is_new only: the slot starts from this snapshot (else zero);
                                          // the snapshot must hold exactly start_pos positions
  std::optional<uint32_t> save_snapshot;  // after the step: snapshot <- the slot's state
  std::vector<uint32_t> block_ids;        // is_new: the whole block table; else blocks appended since
};

// What the last stage computes from its final-normed rows (StageOptions::head; a model's
// default_head() in common/model_config.h):
//  - kLanguageModel: the LM head's logits (or their digests), the usual generation;
//  - kEmbedding: no head, the final-normed hidden rows themselves (StepOutput::final_hidden);
//  - kRankClassifier: the classifier head's scores, one per label (a reranker's [yes, no]).
enum class OutputHead : uint8_t { kLanguageModel, kEmbedding, kRankClassifier };

inline const char* output_head_name(OutputHead head) {
  switch (head) {
    case OutputHead::kLanguageModel:
      return "language model";
    case OutputHead::kEmbedding:
      return "embedding";
    case OutputHead::kRankClassifier:
      return "rank classifier";
  }
  return "?";
}

// Assign.output_head's wire names: "lm" (also ""), "embedding", "rank".
inline const char* output_head_wire_name(OutputHead head) {
  return head == OutputHead::kEmbedding ? "embedding" : head == OutputHead::kRankClassifier ? "rank" : "lm";
}
inline bool output_head_from_wire_name(const std::string& name, OutputHead* head) {
  if (name.empty() || name == "lm") {
    *head = OutputHead::kLanguageModel;
  } else if (name == "embedding") {
    *head = OutputHead::kEmbedding;
  } else if (name == "rank") {
    *head = OutputHead::kRankClassifier;
  } else {
    return false;
  }
  return true;
}

struct StageRange {
  uint32_t first_layer = 0;
  uint32_t last_layer = 0;  // exclusive
};

// Pool sizes, fixed when the stage is created (the coordinator sends them in Assign and
// configures its scheduler with the same numbers, so it never plans memory the workers lack).
struct CacheGeometry {
  uint32_t block_size = 16;    // KV rows per block
  uint32_t num_blocks = 0;     // KV blocks per attention layer; 0 = self-managed (pools grow)
  uint32_t max_seqs = 0;       // GDN state slots (managed)
  uint32_t num_snapshots = 0;  // GDN state snapshot buffers (managed; 0 = no prefix cache)
  // Speculation (worker side, from Assign.spec_k): GDN rollback records per state slot,
  // allocated with the pools (managed); 0 = grown on first use, as tools without a budget do.
  uint32_t captures_per_slot = 0;
  // The KV cache's element types (common/kv_format.h; from --kv-cache-type[-k|-v], sent in Assign).
  KvType k_type = KvType::kF32;
  KvType v_type = KvType::kF32;
  bool managed() const { return num_blocks > 0; }
  bool operator==(const CacheGeometry&) const = default;
};

// Per-sequence state one stage holds, in f32 elements (stage_cache_shapes() in
// common/stage_footprint.h derives it from the config; the pools and the memory sizing use it).
struct CacheShapes {
  size_t n_attention_layers = 0;  // KV pools (the MTP block's included)
  size_t kv_row_floats = 0;       // n_kv_heads * head_dim: one K (or V) row of one layer
  size_t n_gdn_layers = 0;
  size_t conv_floats = 0;  // per GDN layer: the conv window
  size_t ssm_floats = 0;   // per GDN layer: the recurrent state
  bool operator==(const CacheShapes&) const = default;
};

}  // namespace ds
