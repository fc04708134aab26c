// Bidirectional (non-causal) multi-head attention within segments of a step's rows: the vision
// tower's per-image attention. Rows [starts[s], starts[s+1]) attend to each other and to no
// other row; every head has its own keys and values (no grouping). f32 softmax.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ds::cpu {

class ThreadPool;

struct SegmentAttention {
  const float* q = nullptr;  // row t, head h at q + t * qkv_stride + h * head_dim
  const float* k = nullptr;  // likewise
  const float* v = nullptr;  // likewise
  size_t qkv_stride = 0;     // floats between consecutive rows of q, k and v
  size_t n_tokens = 0;
  size_t n_heads = 0;
  size_t head_dim = 0;
  const uint32_t* starts = nullptr;  // host [n_segments + 1]: 0 = starts[0] < ... = n_tokens
  size_t n_segments = 0;
  float scale = 0;        // softmax(q.k * scale)
  float* out = nullptr;   // row t, head h at out + t * out_stride + h * head_dim
  size_t out_stride = 0;  // >= n_heads * head_dim
};

// nullptr when `a` is consistent, else why not (segment bounds, strides, null pointers).
const char* segment_attention_problem(const SegmentAttention& a);

// Throws std::invalid_argument when segment_attention_problem() says why.
void attention_segments(const SegmentAttention& a, ThreadPool* pool);

}  // namespace ds::cpu
