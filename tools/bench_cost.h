// deltaserve-bench's roofline bookkeeping: what a model's prefill computes and what a decode
// step must read, from its GGUF and config, so the bench can print each figure's share of the
// device's limits (docs/PERFORMANCE.md).
#pragma once

#include <cstddef>

#include "common/gguf.h"
#include "common/kv_options.h"
#include "common/model_config.h"

namespace ds::bench {

struct ModelCost {
  double decode_weight_bytes = 0;  // streamed once per decode step (batch 1), routed experts excluded
  double matrix_params = 0;        // main-stack + LM-head matrices a token uses: 2 FLOP each
  double head_params = 0;          // LM head alone (prefill needs it for one row only)
  double kv_bytes_per_pos = 0;     // K+V of all attention layers (as their types store them), per cached position
  double state_bytes = 0;          // f32 GDN conv + recurrent state of one sequence
  // MoE: the stacked routed experts' bytes (all E) and the share of them one token reads (k / E).
  double expert_bytes = 0;
  double expert_share = 0;
};

// Per decode step and token from the stage footprint (common/stage_footprint.h) of the whole main
// stack: the MTP block runs only when speculating, so neither its tensors nor its KV count here.
// A MoE token reads k of the E experts of each layer: their bytes count as k/E of the stacks.
ModelCost model_cost(const GgufFile& g, const ModelConfig& c, const KvTypeFlags& kv);

// Prefill FLOPs of an n-token prompt: matrices for every token, the LM head for the last one,
// causal attention (QK^T and PV: 4*H*d per query-key pair, keys 1..t for token t).
double prefill_flops(const ModelCost& m, const ModelConfig& c, size_t n);

// Bytes one decode step must read (weights, state read+write, K/V of `ctx` positions).
double decode_bytes(const ModelCost& m, size_t ctx);

// Bytes one batched decode step of `n_seqs` sequences at context `ctx` must move: the weights
// once, each sequence's GDN state read+write and K/V. MoE: the experts some sequence picks, under
// uniform routing E * (1 - (1 - k/E)^n) of the E (random weights route about uniformly).
double batch_decode_bytes(const ModelCost& m, size_t n_seqs, size_t ctx);

}  // namespace ds::bench
