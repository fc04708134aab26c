#include <cmath>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/attention_decode.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/kv_codec.cuh"

namespace ds::cuda {
namespace {

using detail::kWarp;

// One block per (query token, head). Its warps take interleaved keys (warp w: tau = w, w+kWarps,
// ...) and each keeps an online-softmax state (max, sum, weighted V) over its keys; lane l holds
// head dims l, l+32, ... The warps' states are merged at the end. Simple and exact in f32; sharing
// K/V across the heads of a group and split-K for long decode are for the speed issues.
constexpr int kWarps = 4;
constexpr int kPerLane = static_cast<int>(kMaxAttentionHeadDim) / kWarp;

struct WarpState {
  float mx;             // running max of the scaled scores
  float sum;            // sum of exp(score - mx)
  float acc[kPerLane];  // sum of exp(score - mx) * v
};

// Keys are visited per warp in row order; row tau is found through the block table exactly as
// on the CPU (cpu::kv_row_offset), so paging changes where rows are read, never the math.
// head_off selects the kv head inside a cache row.
template <KvType KT, KvType VT>
__device__ void attend_keys(const AttentionShape& s, const float* qv, const KvPages& kv, size_t head_off, float scale,
                            size_t n_keys, unsigned warp, unsigned lane, WarpState& st) {
  const detail::KvRead<KT> K = detail::kv_read<KT>(kv.k_pool, s.kv_row_stride);
  const detail::KvRead<VT> V = detail::kv_read<VT>(kv.v_pool, s.kv_row_stride);
  for (size_t tau = warp; tau < n_keys; tau += kWarps) {
    const size_t row = cpu::kv_pool_row(kv.block_table, kv.block_size, tau);
    float p = 0.0f;
#pragma unroll
    for (int e = 0; e < kPerLane; ++e) {
      const size_t i = lane + size_t{kWarp} * e;
      if (i < s.head_dim) p += qv[e] * K.at(row, head_off + i);
    }
    const float score = detail::warp_sum(p) * scale;
    const float mx = fmaxf(st.mx, score);
    const float corr = expf(st.mx - mx);  // 0 on the first key (st.mx = -inf)
    const float w = expf(score - mx);
    st.sum = st.sum * corr + w;
#pragma unroll
    for (int e = 0; e < kPerLane; ++e) {
      const size_t i = lane + size_t{kWarp} * e;
      st.acc[e] = st.acc[e] * corr + (i < s.head_dim ? w * V.at(row, head_off + i) : 0.0f);
    }
    st.mx = mx;
  }
}

template <KvType KT, KvType VT>
__global__ void __launch_bounds__(kWarps* kWarp)
    attention_kernel(AttentionShape s, const float* q, KvPages kv, float scale, float* out) {
  __shared__ float s_mx[kWarps], s_sum[kWarps];
  __shared__ float s_acc[kWarps][kMaxAttentionHeadDim];
  const size_t h = blockIdx.x % s.n_heads, t = blockIdx.x / s.n_heads;
  const size_t g = h / (s.n_heads / s.n_kv_heads);        // grouped GQA mapping
  const size_t n_keys = s.kv_len - s.n_q_tokens + t + 1;  // causal: rows 0 .. first_row + t
  const unsigned warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;

  const float* qh = q + t * s.q_token_stride + h * s.q_head_stride;
  float qv[kPerLane];
#pragma unroll
  for (int e = 0; e < kPerLane; ++e) {
    const size_t i = lane + size_t{kWarp} * e;
    qv[e] = i < s.head_dim ? qh[i] : 0.0f;
  }
  WarpState st{-INFINITY, 0.0f, {}};
  attend_keys<KT, VT>(s, qv, kv, g * s.head_dim, scale, n_keys, warp, lane, st);

  if (lane == 0) {
    s_mx[warp] = st.mx;
    s_sum[warp] = st.sum;
  }
#pragma unroll
  for (int e = 0; e < kPerLane; ++e) {
    const size_t i = lane + size_t{kWarp} * e;
    if (i < s.head_dim) s_acc[warp][i] = st.acc[e];
  }
  __syncthreads();
  // Merge: warps that saw no key have mx = -inf and weigh exp(-inf) = 0.
  float mx = s_mx[0];
  for (int w = 1; w < kWarps; ++w) mx = fmaxf(mx, s_mx[w]);
  float sum = 0.0f, wgt[kWarps];
  for (int w = 0; w < kWarps; ++w) {
    wgt[w] = expf(s_mx[w] - mx);
    sum += s_sum[w] * wgt[w];
  }
  float* o = out + t * s.out_token_stride + h * s.head_dim;
  for (size_t i = threadIdx.x; i < s.head_dim; i += blockDim.x) {
    float acc = 0.0f;
    for (int w = 0; w < kWarps; ++w) acc += s_acc[w][i] * wgt[w];
    o[i] = acc / sum;
  }
}

cudaError_t check_shape(const AttentionShape& s, size_t kv_block_size) {
  if (s.n_kv_heads == 0 || s.n_heads % s.n_kv_heads != 0) return cudaErrorInvalidValue;
  if (s.head_dim == 0 || s.head_dim > kMaxAttentionHeadDim) return cudaErrorInvalidValue;
  if (s.kv_len < s.n_q_tokens) return cudaErrorInvalidValue;
  if (s.q_head_stride < s.head_dim || s.kv_row_stride < s.n_kv_heads * s.head_dim) return cudaErrorInvalidValue;
  if (s.kv_len > 0 && kv_block_size == 0) return cudaErrorInvalidValue;
  if (s.n_q_tokens > 1 && (s.q_token_stride < s.q_head_stride * (s.n_heads - 1) + s.head_dim ||
                           s.out_token_stride < s.n_heads * s.head_dim)) {
    return cudaErrorInvalidValue;
  }
  if (s.n_q_tokens * s.n_heads > detail::kMaxGridX) return cudaErrorInvalidValue;
  return cudaSuccess;
}

}  // namespace

cudaError_t attention_causal(const AttentionShape& s, const float* q, const KvPages& kv, float scale, float* out,
                             cudaStream_t stream) {
  if (s.n_q_tokens == 0 || s.n_heads == 0) return cudaSuccess;
  if (q == nullptr || kv.k_pool == nullptr || kv.v_pool == nullptr || kv.block_table == nullptr || out == nullptr) {
    return cudaErrorInvalidValue;
  }
  for (const void* p :
       {static_cast<const void*>(q), static_cast<const void*>(kv.k_pool), static_cast<const void*>(kv.v_pool),
        static_cast<const void*>(kv.block_table), static_cast<const void*>(out)}) {
    if (!detail::aligned_to(p, 4)) return cudaErrorMisalignedAddress;
  }
  if (const cudaError_t e = check_shape(s, kv.block_size); e != cudaSuccess) return e;
  // Decode (few query tokens): split-K over the keys, GQA heads sharing K/V loads.
  if (detail::attention_decode_applies(s)) return detail::attention_decode(s, q, kv, scale, out, stream);
  return detail::with_kv_types(kv.k_type, kv.v_type, [&](auto kt, auto vt) {
    attention_kernel<decltype(kt)::value, decltype(vt)::value>
        <<<static_cast<unsigned>(s.n_q_tokens * s.n_heads), kWarps * kWarp, 0, stream>>>(s, q, kv, scale, out);
    return detail::launch_status();
  });
}

}  // namespace ds::cuda
