// Gated DeltaNet recurrence (qwen35-model-spec.md §5.4, §5.6), one sequence at a time.
// All math f32. Per value head n (of n_v_heads), key/query head n % n_k_heads (GGUF tiled order).
//
// Inputs for T tokens:
//   q, k: [T, n_k_heads, dk] already L2-normalized; q NOT yet scaled (the op scales by 1/sqrt(dk))
//   v:    [T, n_v_heads, dv]
//   g:    [T, n_v_heads] log-decay (<= 0), beta: [T, n_v_heads] write strength in (0,1)
//   state:[n_v_heads, dk, dv] row-major S[n][i][j] (key index i, value index j), updated in place
//   out:  [T, n_v_heads, dv]
// Row strides: q/k rows are n_k_heads*dk floats apart times `qk_token_stride` (in floats, >=
// n_k_heads*dk) so the views can point into the conv output; v uses v_token_stride.
#pragma once

#include <cstddef>

namespace ds::cpu {

struct GdnShape {
  size_t n_tokens;
  size_t n_k_heads;
  size_t n_v_heads;
  size_t dk;
  size_t dv;
  size_t qk_token_stride;  // floats between tokens in q and k
  size_t v_token_stride;   // floats between tokens in v
};

// Token-by-token oracle: decay, read, delta, write, output with the updated state.
void gdn_recurrent(const GdnShape& s, const float* q, const float* k, const float* v, const float* g,
                   const float* beta, float* state, float* out);

// Chunked (UT/WY) form with chunk size `chunk` (64 in the reference); same contract and
// results within float rounding. A partial last chunk is handled exactly.
void gdn_chunked(const GdnShape& s, const float* q, const float* k, const float* v, const float* g,
                 const float* beta, float* state, float* out, size_t chunk = 64);

class ThreadPool;
// The same, parallel over value heads (results identical for any pool; nullptr: default_pool()).
// The overloads above use default_pool().
void gdn_recurrent(const GdnShape& s, const float* q, const float* k, const float* v, const float* g,
                   const float* beta, float* state, float* out, ThreadPool* pool);
void gdn_chunked(const GdnShape& s, const float* q, const float* k, const float* v, const float* g,
                 const float* beta, float* state, float* out, size_t chunk, ThreadPool* pool);

}  // namespace ds::cpu
