// What one pipeline stage [first_layer, last_layer) of a model holds, decided in one place for
// every process: which GGUF tensors it reads (its blocks; the embedding on the first stage; the
// final norm, LM head and MTP blocks on the last) and the per-sequence state of its layers. The
// worker's loader and pool sizing, the coordinator's layout planner and the bench all ask here,
// so they cannot disagree. Names follow the GGUF convention every architecture here uses
// (blk.N.*, token_embd, output_norm, output; cls.* for a reranker's classifier head). Which head
// the last stage computes (OutputHead) decides whether it reads the LM head or the classifier.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/stage_types.h"

namespace ds {

class GgufFile;
struct GgufTensor;
struct ModelConfig;

enum class TensorRole {
  kLayer,       // blk.N.* with N < n_layer: main-stack layer N
  kMtp,         // blk.N.* with N >= n_layer: an MTP block (executed only when speculating)
  kEmbedding,   // token_embd.*
  kHead,        // output.* (untied LM head)
  kFinalNorm,   // output_norm.*
  kClassifier,  // cls.* (qwen3 reranker: cls.output, the rank head's rows; read in rank mode only)
  kOther,       // anything else (read by the last stage)
};

struct TensorPlace {
  TensorRole role = TensorRole::kOther;
  uint32_t layer = 0;  // kLayer / kMtp: the block number
};

TensorPlace tensor_place(const std::string& name, const ModelConfig& cfg);

// Whether the stage reads the tensor. `as_matrix`: only as a matmul weight (the embedding table
// of an untied model is only gathered, by the first stage; a tied one is also the LM head).
// `head`: what the last stage computes. The LM head (output, or a tied token_embd) is read for
// kLanguageModel, and for kRankClassifier without cls.output only as the label tokens' rows
// (a few rows copied at load, counted as not read); cls.* only for kRankClassifier.
bool stage_reads(const GgufTensor& t, const ModelConfig& cfg, StageRange range, bool as_matrix,
                 OutputHead head = OutputHead::kLanguageModel);

// Bytes of the tensors the stage reads.
uint64_t stage_weight_bytes(const GgufFile& gguf, const ModelConfig& cfg, StageRange range,
                            OutputHead head = OutputHead::kLanguageModel);

// Bytes of each main-stack layer's tensors (blk.N.* with N < n_layer), for the layout planner.
std::vector<uint64_t> layer_weight_bytes(const GgufFile& gguf, uint32_t n_layer);

// The per-sequence state of the stage: one KV pool per attention layer (+1 for the MTP block
// on the last stage when the model has one), conv + recurrent state per Gated DeltaNet layer
// (qwen3: every layer full attention, no recurrent state).
CacheShapes stage_cache_shapes(const ModelConfig& cfg, StageRange range);

// Bytes one token's K and V rows take over the shape's attention layers, stored as k / v
// (common/kv_format.h kv_row_bytes): what every KV memory figure is computed from.
uint64_t kv_bytes_per_token(const CacheShapes& shapes, KvType k, KvType v);

}  // namespace ds
