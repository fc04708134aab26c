#include <cmath>

#include "kernels/cuda/attention_prefill.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/kv_codec.cuh"

namespace ds::cuda {
namespace {

using detail::kv_read;
using detail::KvRead;

constexpr int kBq = 64;  // query rows per block
static_assert(kBq == detail::kPrefillTileRows);
constexpr int kBk = 32;  // key rows per tile
constexpr int kThreads = 256;
constexpr int kMaxD = static_cast<int>(kAttentionPrefillMaxHeadDim);
constexpr int kLd = kMaxD + 4;  // 16-byte aligned rows; consecutive rows start 4 banks apart
constexpr int kLdp = kBk + 1;
constexpr int kGroup = 8;                 // threads sharing a pair of query rows
constexpr int kAccCols = kMaxD / kGroup;  // 32 output columns per thread and row
constexpr size_t kSmemFloats = size_t{kBq} * kLd + size_t{kBk} * kLd + size_t{kBq} * kLdp;

__device__ __forceinline__ size_t min_size(size_t a, size_t b) {
  return a < b ? a : b;
}

// Pool rows of one key tile, through the block table as on the CPU.
__device__ void tile_rows(const KvPages& kv, size_t k0, int kn, size_t* rows) {
  if (threadIdx.x < kBk) {
    const size_t tau = k0 + threadIdx.x;
    rows[threadIdx.x] = static_cast<int>(threadIdx.x) < kn ? cpu::kv_pool_row(kv.block_table, kv.block_size, tau) : 0;
  }
}

// dst[kk][0..d) = values [head_off, head_off + d) of the tile's pool row kk, as f32 (zero rows
// past kn); four values a thread (d % 4 == 0; f32 pools: one float4 load).
template <KvType T>
__device__ void load_tile(const KvRead<T>& pool, const size_t* rows, size_t head_off, int kn, size_t d, float* dst) {
  const size_t d4 = d / 4;
  for (size_t e = threadIdx.x; e < kBk * d4; e += kThreads) {
    const int kk = static_cast<int>(e / d4);
    const size_t i = (e % d4) * 4 + head_off;
    float4 v = make_float4(0, 0, 0, 0);
    if (kk < kn) {
      if constexpr (T == KvType::kF32) {
        v = *reinterpret_cast<const float4*>(pool.pool + rows[kk] * pool.row_bytes + 4 * i);
      } else {
        v = make_float4(pool.at(rows[kk], i), pool.at(rows[kk], i + 1), pool.at(rows[kk], i + 2),
                        pool.at(rows[kk], i + 3));
      }
    }
    *reinterpret_cast<float4*>(dst + kk * kLd + i - head_off) = v;
  }
}

// Thread (row pair rp = tid / 8, lane-in-group cg = tid % 8): query rows 2rp, 2rp+1; score columns
// cg + 8b (b < 4); output columns 4cg + 32j + (0..3) (j < 8). The 8 threads of a row pair
// reduce the softmax max and sum with shuffles, so the running (max, sum) of a row live in the
// same threads as its output accumulators.
// The query tile t0 .. t0+63 of one (sequence, head h): the body of both kernels below, so a
// sequence's bits do not depend on whether it ran alone or in a batch.
template <KvType KT, KvType VT>
__device__ __forceinline__ void prefill_tile(const AttentionShape& s, const float* q, const KvPages& kv, float scale,
                                             float* out, size_t t0, size_t h) {
  extern __shared__ __align__(16) float smem[];
  __shared__ size_t rowoff[kBk];
  const KvRead<KT> K = kv_read<KT>(kv.k_pool, s.kv_row_stride);
  const KvRead<VT> V = kv_read<VT>(kv.v_pool, s.kv_row_stride);
  float* Qs = smem;             // [kBq][kLd] scaled queries
  float* KVs = Qs + kBq * kLd;  // [kBk][kLd] K tile, then V tile
  float* Ps = KVs + kBk * kLd;  // [kBq][kLdp] probabilities of the tile
  const size_t d = s.head_dim, g = h / (s.n_heads / s.n_kv_heads);
  const size_t first_row = s.kv_len - s.n_q_tokens;
  const int rows = static_cast<int>(min_size(kBq, s.n_q_tokens - t0));
  const int tid = static_cast<int>(threadIdx.x), rp = tid / kGroup, cg = tid % kGroup;
  const int r0 = 2 * rp;

  for (size_t e = tid; e < kBq * (d / 4); e += kThreads) {
    const int rr = static_cast<int>(e / (d / 4));
    const size_t i = (e % (d / 4)) * 4;
    float4 v = make_float4(0, 0, 0, 0);
    if (rr < rows) {
      const float* qr = q + (t0 + rr) * s.q_token_stride + h * s.q_head_stride + i;
      v = make_float4(qr[0] * scale, qr[1] * scale, qr[2] * scale, qr[3] * scale);
    }
    *reinterpret_cast<float4*>(Qs + rr * kLd + i) = v;
  }
  // Last key row each of this thread's query rows may see (padded rows reuse the last real one).
  size_t last[2];
#pragma unroll
  for (int x = 0; x < 2; ++x) last[x] = first_row + t0 + static_cast<size_t>(r0 + x < rows ? r0 + x : rows - 1);
  const size_t n_keys = first_row + t0 + rows;

  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  float acc[2][kAccCols];
#pragma unroll
  for (int x = 0; x < 2; ++x)
#pragma unroll
    for (int c = 0; c < kAccCols; ++c) acc[x][c] = 0.0f;

  for (size_t k0 = 0; k0 < n_keys; k0 += kBk) {
    const int kn = static_cast<int>(min_size(kBk, n_keys - k0));
    __syncthreads();  // the previous tile's V and P readers are done (and Q is staged)
    tile_rows(kv, k0, kn, rowoff);
    __syncthreads();
    load_tile(K, rowoff, g * d, kn, d, KVs);
    __syncthreads();

    float sc[2][4] = {};
    for (size_t i = 0; i < d; i += 4) {
      const float4 qa = *reinterpret_cast<const float4*>(Qs + r0 * kLd + i);
      const float4 qb = *reinterpret_cast<const float4*>(Qs + (r0 + 1) * kLd + i);
#pragma unroll
      for (int b = 0; b < 4; ++b) {
        const float4 kb = *reinterpret_cast<const float4*>(KVs + (cg + kGroup * b) * kLd + i);
        sc[0][b] += qa.x * kb.x + qa.y * kb.y + qa.z * kb.z + qa.w * kb.w;
        sc[1][b] += qb.x * kb.x + qb.y * kb.y + qb.z * kb.z + qb.w * kb.w;
      }
    }
    float corr[2];
#pragma unroll
    for (int x = 0; x < 2; ++x) {
      float mx = -INFINITY;
#pragma unroll
      for (int b = 0; b < 4; ++b) {
        const int kk = cg + kGroup * b;
        if (kk >= kn || k0 + kk > last[x]) sc[x][b] = -INFINITY;  // causal mask / past the tile
        mx = fmaxf(mx, sc[x][b]);
      }
#pragma unroll
      for (int off = 1; off < kGroup; off *= 2) mx = fmaxf(mx, __shfl_xor_sync(0xFFFFFFFFu, mx, off));
      // Finite from the first tile on: key 0 is visible to every query row.
      const float m_new = fmaxf(m[x], mx);
      corr[x] = expf(m[x] - m_new);  // 0 on the first tile (m = -inf)
      float psum = 0.0f;
#pragma unroll
      for (int b = 0; b < 4; ++b) {
        const float p = expf(sc[x][b] - m_new);
        Ps[(r0 + x) * kLdp + cg + kGroup * b] = p;
        psum += p;
      }
#pragma unroll
      for (int off = 1; off < kGroup; off *= 2) psum += __shfl_xor_sync(0xFFFFFFFFu, psum, off);
      l[x] = l[x] * corr[x] + psum;
      m[x] = m_new;
    }
    __syncthreads();  // K no longer read; P complete
    load_tile(V, rowoff, g * d, kn, d, KVs);
    __syncthreads();

#pragma unroll
    for (int x = 0; x < 2; ++x)
#pragma unroll
      for (int c = 0; c < kAccCols; ++c) acc[x][c] *= corr[x];
    for (int kk = 0; kk < kn; ++kk) {
      const float p0 = Ps[r0 * kLdp + kk], p1 = Ps[(r0 + 1) * kLdp + kk];
#pragma unroll
      for (int j = 0; j < kAccCols / 4; ++j) {
        const int c = 4 * cg + 32 * j;  // columns past d hold zeros or stale data: never written out
        const float4 v = *reinterpret_cast<const float4*>(KVs + kk * kLd + c);
        acc[0][4 * j] += p0 * v.x;
        acc[0][4 * j + 1] += p0 * v.y;
        acc[0][4 * j + 2] += p0 * v.z;
        acc[0][4 * j + 3] += p0 * v.w;
        acc[1][4 * j] += p1 * v.x;
        acc[1][4 * j + 1] += p1 * v.y;
        acc[1][4 * j + 2] += p1 * v.z;
        acc[1][4 * j + 3] += p1 * v.w;
      }
    }
  }
#pragma unroll
  for (int x = 0; x < 2; ++x) {
    if (r0 + x >= rows) continue;
    float* o = out + (t0 + r0 + x) * s.out_token_stride + h * d;
    const float inv = 1.0f / l[x];
#pragma unroll
    for (int j = 0; j < kAccCols / 4; ++j) {
      const int c = 4 * cg + 32 * j;
      if (c < static_cast<int>(d)) {
        *reinterpret_cast<float4*>(o + c) =
            make_float4(acc[x][4 * j] * inv, acc[x][4 * j + 1] * inv, acc[x][4 * j + 2] * inv, acc[x][4 * j + 3] * inv);
      }
    }
  }
}

template <KvType KT, KvType VT>
__global__ void __launch_bounds__(kThreads)
    prefill_kernel(AttentionShape s, const float* q, KvPages kv, float scale, float* out) {
  prefill_tile<KT, VT>(s, q, kv, scale, out, size_t{blockIdx.x} * kBq, blockIdx.y);
}

// Block (x, y) = (tile x of the flattened list, head y); `base` holds the batch's heads and strides.
template <KvType KT, KvType VT>
__global__ void __launch_bounds__(kThreads)
    prefill_batch_kernel(AttentionShape base, const float* q, KvPages pools, const detail::PrefillTile* tiles,
                         const int32_t* tables, float scale, float* out) {
  const detail::PrefillTile t = tiles[blockIdx.x];
  AttentionShape s = base;
  s.n_q_tokens = t.n_q;
  s.kv_len = t.kv_len;
  KvPages kv = pools;
  kv.block_table = tables + t.table;
  prefill_tile<KT, VT>(s, q + t.q_offset, kv, scale, out + t.out_offset, t.t0, blockIdx.y);
}

cudaError_t check(const AttentionShape& s, const float* q, const KvPages& kv, const float* out) {
  if (q == nullptr || kv.k_pool == nullptr || kv.v_pool == nullptr || kv.block_table == nullptr || out == nullptr) {
    return cudaErrorInvalidValue;
  }
  if (s.n_kv_heads == 0 || s.n_heads % s.n_kv_heads != 0 || s.n_heads > 65535) return cudaErrorInvalidValue;
  if (s.head_dim == 0 || s.head_dim > kAttentionPrefillMaxHeadDim || s.head_dim % 4 != 0) return cudaErrorInvalidValue;
  if (s.kv_len < s.n_q_tokens || kv.block_size == 0) return cudaErrorInvalidValue;
  if (s.q_head_stride < s.head_dim || s.kv_row_stride < s.n_kv_heads * s.head_dim) return cudaErrorInvalidValue;
  if (s.n_q_tokens > 1 && (s.q_token_stride < s.q_head_stride * (s.n_heads - 1) + s.head_dim ||
                           s.out_token_stride < s.n_heads * s.head_dim)) {
    return cudaErrorInvalidValue;
  }
  // float4 access to f32 K/V rows (other types load value by value) and output rows.
  if (!detail::aligned_to(kv.k_pool, 16) || !detail::aligned_to(kv.v_pool, 16) || !detail::aligned_to(out, 16) ||
      s.kv_row_stride % 4 != 0 || s.out_token_stride % 4 != 0 || !detail::aligned_to(q, 4) ||
      !detail::aligned_to(kv.block_table, 4)) {
    return cudaErrorMisalignedAddress;
  }
  if ((s.n_q_tokens + kBq - 1) / kBq > detail::kMaxGridX) return cudaErrorInvalidValue;
  return cudaSuccess;
}

}  // namespace

bool attention_prefill_applies(const AttentionShape& s, const float* q, const KvPages& kv, const float* out) {
  return check(s, q, kv, out) == cudaSuccess;
}

cudaError_t attention_prefill(const AttentionShape& s, const float* q, const KvPages& kv, float scale, float* out,
                              cudaStream_t stream) {
  if (s.n_q_tokens == 0 || s.n_heads == 0) return cudaSuccess;
  if (const cudaError_t e = check(s, q, kv, out); e != cudaSuccess) return e;
  return detail::with_kv_types(kv.k_type, kv.v_type, [&](auto kt, auto vt) {
    constexpr KvType KT = decltype(kt)::value, VT = decltype(vt)::value;
    // Per call: the attribute belongs to the current device.
    const cudaError_t e = cudaFuncSetAttribute(prefill_kernel<KT, VT>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               static_cast<int>(kSmemFloats * sizeof(float)));
    if (e != cudaSuccess) return e;
    const dim3 grid(static_cast<unsigned>((s.n_q_tokens + kBq - 1) / kBq), static_cast<unsigned>(s.n_heads));
    prefill_kernel<KT, VT><<<grid, kThreads, kSmemFloats * sizeof(float), stream>>>(s, q, kv, scale, out);
    return detail::launch_status();
  });
}

namespace detail {

cudaError_t launch_prefill_batch(const PrefillBatchWork& w, cudaStream_t stream) {
  if (w.n_tiles == 0 || w.shape.n_heads == 0) return cudaSuccess;
  return with_kv_types(w.pools.k_type, w.pools.v_type, [&](auto kt, auto vt) {
    constexpr KvType KT = decltype(kt)::value, VT = decltype(vt)::value;
    const cudaError_t e =
        cudaFuncSetAttribute(prefill_batch_kernel<KT, VT>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(kSmemFloats * sizeof(float)));
    if (e != cudaSuccess) return e;
    const dim3 grid(static_cast<unsigned>(w.n_tiles), static_cast<unsigned>(w.shape.n_heads));
    prefill_batch_kernel<KT, VT><<<grid, kThreads, kSmemFloats * sizeof(float), stream>>>(
        w.shape, w.q, w.pools, w.tiles, w.tables, w.scale, w.out);
    return launch_status();
  });
}

}  // namespace detail
}  // namespace ds::cuda
