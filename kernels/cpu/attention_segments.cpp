#include "kernels/cpu/attention_segments.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cpu/dot.h"
#include "kernels/cpu/thread_pool.h"

namespace ds::cpu {
namespace {

// Queries per work item: enough rows to amortise a chunk's scratch, few enough that one image
// of a few hundred patches still spreads over the pool.
constexpr size_t kQueryBlock = 16;

// A work item: rows [q_begin, q_end) of one head, attending to the keys [k_begin, k_end) of their
// segment.
struct QueryBlock {
  size_t head;
  size_t q_begin, q_end;
  size_t k_begin, k_end;
};

std::vector<QueryBlock> query_blocks(const SegmentAttention& a) {
  std::vector<QueryBlock> blocks;
  for (size_t s = 0; s < a.n_segments; ++s) {
    const size_t begin = a.starts[s], end = a.starts[s + 1];
    for (size_t h = 0; h < a.n_heads; ++h) {
      for (size_t q = begin; q < end; q += kQueryBlock) {
        blocks.push_back({h, q, std::min(q + kQueryBlock, end), begin, end});
      }
    }
  }
  return blocks;
}

// One (query row, head): out = sum_tau softmax(scale * q.k_tau)_tau v_tau over the segment's keys,
// in key order. Only this row's data enters, so the bits do not depend on the threads nor on the
// other segments. scores: room for the segment's keys.
void attend_row(const SegmentAttention& a, size_t t, const QueryBlock& b, float* scores) {
  const size_t d = a.head_dim, off = b.head * d;
  const float* q = a.q + t * a.qkv_stride + off;
  const size_t n_keys = b.k_end - b.k_begin;
  float mx = -INFINITY;
  for (size_t j = 0; j < n_keys; ++j) {
    scores[j] = detail::dot(q, a.k + (b.k_begin + j) * a.qkv_stride + off, d) * a.scale;
    mx = std::max(mx, scores[j]);
  }
  float sum = 0.0f;
  for (size_t j = 0; j < n_keys; ++j) {
    scores[j] = std::exp(scores[j] - mx);
    sum += scores[j];
  }
  for (size_t j = 0; j < n_keys; ++j) scores[j] /= sum;  // probabilities, as softmax() returns

  float* out = a.out + t * a.out_stride + off;
  std::fill(out, out + d, 0.0f);
  for (size_t j = 0; j < n_keys; ++j) {
    const float p = scores[j];
    const float* v = a.v + (b.k_begin + j) * a.qkv_stride + off;
    for (size_t i = 0; i < d; ++i) out[i] += p * v[i];
  }
}

}  // namespace

const char* segment_attention_problem(const SegmentAttention& a) {
  if (a.n_tokens == 0) return nullptr;  // nothing is read
  if (a.n_heads == 0 || a.head_dim == 0) return "n_heads and head_dim must be positive";
  if (a.q == nullptr || a.k == nullptr || a.v == nullptr || a.out == nullptr) return "null q, k, v or out";
  if (a.qkv_stride < a.n_heads * a.head_dim) return "qkv_stride below n_heads * head_dim";
  if (a.out_stride < a.n_heads * a.head_dim) return "out_stride below n_heads * head_dim";
  if (a.starts == nullptr || a.n_segments == 0) return "no segments";
  if (a.starts[0] != 0) return "starts[0] must be 0";
  for (size_t s = 0; s < a.n_segments; ++s) {
    if (a.starts[s + 1] <= a.starts[s]) return "segment starts must increase strictly";
  }
  if (a.starts[a.n_segments] != a.n_tokens) return "starts[n_segments] must equal n_tokens";
  if (!std::isfinite(a.scale)) return "scale must be finite";
  return nullptr;
}

void attention_segments(const SegmentAttention& a, ThreadPool* pool) {
  if (const char* why = segment_attention_problem(a)) {
    throw std::invalid_argument(std::string("attention_segments: ") + why);
  }
  if (a.n_tokens == 0) return;
  if (pool == nullptr) pool = default_pool();
  size_t longest = 0;
  for (size_t s = 0; s < a.n_segments; ++s) longest = std::max<size_t>(longest, a.starts[s + 1] - a.starts[s]);

  const std::vector<QueryBlock> blocks = query_blocks(a);
  pool->parallel_for(blocks.size(), 1, [&](size_t begin, size_t end) {
    std::vector<float> scores(longest);
    for (size_t i = begin; i < end; ++i) {
      for (size_t t = blocks[i].q_begin; t < blocks[i].q_end; ++t) attend_row(a, t, blocks[i], scores.data());
    }
  });
}

}  // namespace ds::cpu
