// Split-K attention for decode (see attention_decode.h).
#include "kernels/cuda/attention_decode.h"

#include <algorithm>
#include <cmath>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/device_info.h"
#include "kernels/cuda/matmul_fast.h"  // stream_workspace

namespace ds::cuda::detail {
namespace {

constexpr int kWarps = 8, kThreads = kWarps * kWarp;
constexpr int kSub = 64;                                          // keys scored per round
constexpr int kPerLane = static_cast<int>(kMaxAttentionHeadDim) / kWarp;  // 8 head dims per lane
constexpr int kGroup = static_cast<int>(kDecodeMaxGroup);
constexpr size_t kMinKeysPerSplit = 32;  // below this a split costs more than it saves
constexpr size_t kMaxSplits = 256;
static_assert(kThreads >= static_cast<int>(kMaxAttentionHeadDim), "one thread per head dim in the V pass");

// Where a split's partial result lives: acc [n_q][H][splits][d], then (max, sum) [n_q][H][splits][2].
struct Partials {
  float* acc;
  float* ml;
  size_t n_splits;
};

struct SplitState {  // per query head of the group, in shared memory
  float mx[kGroup], sum[kGroup], corr[kGroup];
};

// Scores of the round's nk keys against the group's queries, scaled, into p[j][i]: warp w takes
// keys w, w+8, ..., loading kBatch K rows before reducing any (several loads in flight).
constexpr int kBatch = 4;
__device__ void score_keys(const cpu::AttentionShape& s, const KvPages& kv, const size_t* rowoff, int nk,
                           const float (&qv)[kGroup][kPerLane], int group, float scale, float (*p)[kSub]) {
  const int warp = static_cast<int>(threadIdx.x) / kWarp, lane = static_cast<int>(threadIdx.x) % kWarp;
  for (int i0 = warp; i0 < nk; i0 += kBatch * kWarps) {
    float kvv[kBatch][kPerLane];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int i = i0 + b * kWarps;
      const float* kr = kv.k_pool + rowoff[i < nk ? i : i0];
#pragma unroll
      for (int e = 0; e < kPerLane; ++e) {
        const size_t c = static_cast<size_t>(lane + kWarp * e);
        kvv[b][e] = (i < nk && c < s.head_dim) ? kr[c] : 0.0f;
      }
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int i = i0 + b * kWarps;
#pragma unroll
      for (int j = 0; j < kGroup; ++j) {
        if (j >= group) break;
        float dot = 0.0f;
#pragma unroll
        for (int e = 0; e < kPerLane; ++e) dot += qv[j][e] * kvv[b][e];
        dot = warp_sum(dot);
        if (lane == 0 && i < nk) p[j][i] = dot * scale;
      }
    }
  }
}

// Warp j turns head j's scores into exp(score - new max) and updates the running max and sum.
__device__ void softmax_round(int nk, int group, float (*p)[kSub], SplitState& st) {
  const int warp = static_cast<int>(threadIdx.x) / kWarp, lane = static_cast<int>(threadIdx.x) % kWarp;
  if (warp >= group) return;
  float m = -INFINITY;
  for (int i = lane; i < nk; i += kWarp) m = fmaxf(m, p[warp][i]);
  const float m_new = fmaxf(st.mx[warp], warp_max(m));
  float sum = 0.0f;
  for (int i = lane; i < nk; i += kWarp) {
    const float e = expf(p[warp][i] - m_new);
    p[warp][i] = e;
    sum += e;
  }
  sum = warp_sum(sum);
  __syncwarp();
  if (lane == 0) {
    const float corr = expf(st.mx[warp] - m_new);  // 0 on the first round (mx = -inf)
    st.corr[warp] = corr;
    st.sum[warp] = st.sum[warp] * corr + sum;
    st.mx[warp] = m_new;
  }
}

__global__ void __launch_bounds__(kThreads, 2)  // 2 blocks per SM: the grid is sized for that
    split_kernel(cpu::AttentionShape s, const float* __restrict__ q, KvPages kv, float scale, size_t chunk,
                 Partials part) {
  __shared__ float p[kGroup][kSub];
  __shared__ size_t rowoff[kSub];
  __shared__ SplitState st;
  const size_t split = blockIdx.x, g = blockIdx.y, t = blockIdx.z;
  const int group = static_cast<int>(s.n_heads / s.n_kv_heads);
  const int tid = static_cast<int>(threadIdx.x), lane = tid % kWarp;
  const size_t n_keys = s.kv_len - s.n_q_tokens + t + 1;  // causal
  const size_t k_begin = split * chunk, k_end = min(k_begin + chunk, n_keys);

  float qv[kGroup][kPerLane];
#pragma unroll
  for (int j = 0; j < kGroup; ++j) {
    const float* qh = q + t * s.q_token_stride + (g * group + j) * s.q_head_stride;
#pragma unroll
    for (int e = 0; e < kPerLane; ++e) {
      const size_t c = static_cast<size_t>(lane + kWarp * e);
      qv[j][e] = (j < group && c < s.head_dim) ? qh[c] : 0.0f;
    }
  }
  if (tid < kGroup) {
    st.mx[tid] = -INFINITY;
    st.sum[tid] = 0.0f;
  }
  __syncthreads();  // a split without keys still reads st below
  float acc[kGroup] = {};
  const size_t dim = static_cast<size_t>(tid);
  for (size_t k0 = k_begin; k0 < k_end; k0 += kSub) {
    const int nk = static_cast<int>(min(size_t{kSub}, k_end - k0));
    if (tid < nk) {
      rowoff[tid] = cpu::kv_row_offset(kv.block_table, kv.block_size, s.kv_row_stride, k0 + tid) + g * s.head_dim;
    }
    __syncthreads();
    score_keys(s, kv, rowoff, nk, qv, group, scale, p);
    __syncthreads();
    softmax_round(nk, group, p, st);
    __syncthreads();
    if (dim < s.head_dim) {  // V pass: thread per head dim, coalesced V rows
#pragma unroll
      for (int j = 0; j < kGroup; ++j) acc[j] *= j < group ? st.corr[j] : 0.0f;
#pragma unroll 16
      for (int i = 0; i < nk; ++i) {
        const float v = kv.v_pool[rowoff[i] + dim];
#pragma unroll
        for (int j = 0; j < kGroup; ++j) acc[j] += (j < group ? p[j][i] : 0.0f) * v;
      }
    }
    __syncthreads();  // p and rowoff are rewritten next round
  }
#pragma unroll
  for (int j = 0; j < kGroup; ++j) {
    if (j >= group) break;
    const size_t idx = (t * s.n_heads + g * group + j) * part.n_splits + split;
    if (dim < s.head_dim) part.acc[idx * s.head_dim + dim] = acc[j];
    if (tid == 0) {
      part.ml[2 * idx] = st.mx[j];  // -inf and 0 for a split with no keys
      part.ml[2 * idx + 1] = st.sum[j];
    }
  }
}

// One block per (head, token): out = sum_s acc_s e^(m_s - M) / sum_s l_s e^(m_s - M).
__global__ void __launch_bounds__(kThreads) merge_kernel(cpu::AttentionShape s, Partials part, float* out) {
  const size_t h = blockIdx.x, t = blockIdx.y, dim = threadIdx.x;
  const size_t base = (t * s.n_heads + h) * part.n_splits;
  float m = -INFINITY;
  for (size_t k = 0; k < part.n_splits; ++k) m = fmaxf(m, part.ml[2 * (base + k)]);
  float sum = 0.0f, o = 0.0f;
  for (size_t k = 0; k < part.n_splits; ++k) {
    const float mk = part.ml[2 * (base + k)];
    if (mk == -INFINITY) continue;  // a split past this token's last key
    const float wgt = expf(mk - m);
    sum += part.ml[2 * (base + k) + 1] * wgt;
    if (dim < s.head_dim) o += part.acc[(base + k) * s.head_dim + dim] * wgt;
  }
  if (dim < s.head_dim) out[t * s.out_token_stride + h * s.head_dim + dim] = o / sum;
}

}  // namespace

bool attention_decode_applies(const cpu::AttentionShape& s) {
  return s.n_q_tokens >= 1 && s.n_q_tokens <= kDecodeMaxQTokens && s.n_kv_heads > 0 &&
         s.n_heads / s.n_kv_heads <= kDecodeMaxGroup && s.head_dim <= kMaxAttentionHeadDim && s.kv_len >= 1 &&
         s.n_kv_heads <= 65535;
}

cudaError_t attention_decode(const cpu::AttentionShape& s, const float* q, const cpu::KvPages& kv, float scale,
                             float* out, cudaStream_t stream) {
  // Enough splits for ~2 blocks per SM over all (kv head, token) pairs, each split >= 32 keys.
  const size_t pairs = s.n_kv_heads * s.n_q_tokens;
  const size_t want = (2 * static_cast<size_t>(current_device_sm_count()) + pairs - 1) / pairs;
  const size_t most = (s.kv_len + kMinKeysPerSplit - 1) / kMinKeysPerSplit;
  const size_t n_splits = std::max<size_t>(1, std::min({want, most, kMaxSplits}));
  const size_t chunk = (s.kv_len + n_splits - 1) / n_splits;

  const size_t n_part = s.n_q_tokens * s.n_heads * n_splits;
  cudaError_t e = cudaSuccess;
  auto* ws = static_cast<float*>(stream_workspace(n_part * (s.head_dim + 2) * sizeof(float), stream, &e));
  if (ws == nullptr) return e;
  const Partials part{ws, ws + n_part * s.head_dim, n_splits};
  const dim3 grid(static_cast<unsigned>(n_splits), static_cast<unsigned>(s.n_kv_heads),
                  static_cast<unsigned>(s.n_q_tokens));
  split_kernel<<<grid, kThreads, 0, stream>>>(s, q, kv, scale, chunk, part);
  if ((e = cudaGetLastError()) != cudaSuccess) return e;
  merge_kernel<<<dim3(static_cast<unsigned>(s.n_heads), static_cast<unsigned>(s.n_q_tokens)), kThreads, 0, stream>>>(
      s, part, out);
  return cudaGetLastError();
}

}  // namespace ds::cuda::detail
