// The per-token preparation of a gated full-attention layer, after its q/k/v projections and
// before attention (qwen35-model-spec.md §4.3-4.4): query heads and key heads RMS-normed with
// their gains and rotated (partial NEOX rope, M-RoPE streams), then every token's key and value
// row written to its KV-cache pool row. One argument struct, so backends can run it as one op
// (Backend::attention_prep); its reference is the composition of kernels/cpu rms_norm, rope_neox
// and a row scatter (the Backend default). Header-only: the shape and its consistency check.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "common/kv_format.h"

namespace ds::cpu {

struct AttentionPrep {
  size_t n_tokens = 0;
  size_t n_heads = 0, n_kv_heads = 0, head_dim = 0;
  // Query rows [n_tokens][n_heads][q_head_stride]: head h of token t at
  // qg + (t * n_heads + h) * q_head_stride; its first head_dim floats are normed and roped in
  // place, the rest of the head (the output gate) is left alone. The model uses 2 * head_dim.
  float* qg = nullptr;
  size_t q_head_stride = 0;
  // Key and value rows [n_tokens][n_kv_heads * head_dim], contiguous. k is normed and roped in
  // place; v is only copied. A rotated type leaves its rows rotated (k with q, v alone).
  float* k = nullptr;
  float* v = nullptr;
  const float* q_norm = nullptr;  // [head_dim] gains
  const float* k_norm = nullptr;  // [head_dim] gains
  float eps = 0.0f;
  // Rope: exactly rope_neox's arguments (kernels/cpu/rope.h). positions is a HOST array
  // [3][n_tokens]; n_rot even and <= head_dim.
  size_t n_rot = 0;
  const int32_t* positions = nullptr;
  std::array<int32_t, 4> sections{};
  float theta = 0.0f;
  // KV cache: token t's (roped) key row goes to k_pool row kv_rows[t], its value row to v_pool
  // row kv_rows[t], encoded as k_type / v_type (common/kv_format.h: rows of n_kv_heads * head_dim
  // values, kv_row_bytes each). kv_rows is a HOST array [n_tokens] of distinct rows. A rotated
  // type (q4r) for K rotates the query and key heads (kernels/cpu/kv_codec.h hadamard_heads)
  // before the key is written, q in place; for V it rotates the value heads (v itself is left
  // alone) and attention's output must be rotated back.
  const uint32_t* kv_rows = nullptr;
  void* k_pool = nullptr;
  void* v_pool = nullptr;
  KvType k_type = KvType::kF32;
  KvType v_type = KvType::kF32;

  size_t kv_row_floats() const { return n_kv_heads * head_dim; }
};

// Why `p` cannot run (a sentence naming the inconsistent field), or nullptr when it can. An
// empty step (n_tokens == 0) is fine and does nothing.
inline const char* attention_prep_problem(const AttentionPrep& p) {
  if (p.n_tokens == 0) return nullptr;
  if (p.n_heads == 0 || p.n_kv_heads == 0 || p.head_dim == 0) return "head counts and head_dim must be positive";
  if (p.q_head_stride < p.head_dim) return "q_head_stride is smaller than head_dim";
  if (p.n_rot == 0 || p.n_rot % 2 != 0 || p.n_rot > p.head_dim) return "n_rot must be even and in [2, head_dim]";
  if (p.qg == nullptr || p.k == nullptr || p.v == nullptr) return "qg, k and v must be given";
  if (p.q_norm == nullptr || p.k_norm == nullptr) return "q_norm and k_norm gains must be given";
  if (p.positions == nullptr || p.kv_rows == nullptr) return "positions and kv_rows must be given";
  if (p.k_pool == nullptr || p.v_pool == nullptr) return "k_pool and v_pool must be given";
  if (p.k_pool == p.v_pool) return "k_pool and v_pool must differ";
  if (kv_type_problem(p.k_type, p.head_dim, p.kv_row_floats()) != nullptr) return "k_type does not fit the heads";
  if (kv_type_problem(p.v_type, p.head_dim, p.kv_row_floats()) != nullptr) return "v_type does not fit the heads";
  return nullptr;
}

}  // namespace ds::cpu
