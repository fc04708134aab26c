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

// The raw inputs of the GDN gates (spec §5.1): row t's alpha at alpha[t * alpha_stride + n] and
// beta_raw at beta_raw[t * beta_stride + n], per value head n; a and dt_bias [n_v_heads]. They
// give g = a * softplus(alpha + dt_bias) and beta = sigmoid(beta_raw) (Backend::gdn_gates), for
// ops that compute the gates themselves (Backend::gdn_decode_slots).
struct GdnRawGates {
  const float* alpha;
  size_t alpha_stride;
  const float* beta_raw;
  size_t beta_stride;
  const float* a;
  const float* dt_bias;
};

// Token-by-token oracle: decay, read, delta, write, output with the updated state.
void gdn_recurrent(const GdnShape& s, const float* q, const float* k, const float* v, const float* g, const float* beta,
                   float* state, float* out);

// Chunked (UT/WY) form with chunk size `chunk` (64 in the reference); same contract and
// results within float rounding. A partial last chunk is handled exactly.
void gdn_chunked(const GdnShape& s, const float* q, const float* k, const float* v, const float* g, const float* beta,
                 float* state, float* out, size_t chunk = 64);

class ThreadPool;
// The same, parallel over value heads (results identical for any pool; nullptr: default_pool()).
// The overloads above use default_pool().
void gdn_recurrent(const GdnShape& s, const float* q, const float* k, const float* v, const float* g, const float* beta,
                   float* state, float* out, ThreadPool* pool);
void gdn_chunked(const GdnShape& s, const float* q, const float* k, const float* v, const float* g, const float* beta,
                 float* state, float* out, size_t chunk, ThreadPool* pool);

}  // namespace ds::cpu
