// Tensor-core (bf16 mma.sync m16n8k16, f32 accumulation) prefill attention: see
// attention_prefill.h for the contract and the numerics.
//
// Two launches: the sequence's K and V rows are gathered through the block table into contiguous
// bf16 scratch ([kv_len][Hkv * d], the same row layout as the pool), then one block of 4 warps per
// (64 query rows, query head) walks 64-key tiles: S = Q K^T (16 rows per warp), an online softmax
// on the accumulator fragments, P (rounded to bf16) times V. K and V tiles arrive by cp.async,
// V overlapping the score step and the next K overlapping the P V step. mma.sync and ldmatrix
// exist on sm_80 and later, so the kernel runs on both A100-class and Hopper GPUs.
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>

#include "kernels/cuda/attention_prefill.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/kv_codec.cuh"
#include "kernels/cuda/matmul_fast.h"  // stream_workspace
#include "kernels/cuda/ptx_mma.cuh"

namespace ds::cuda {
namespace {

constexpr int kBq = 64, kBk = 64, kWarps = 4, kThreads = kWarps * 32;
static_assert(kBq == detail::kPrefillTileRows);

using namespace ptx;

// Cache rows 0..kv_len-1 of one sequence, all kv heads, to contiguous bf16 (two values a thread;
// element e = first, first + stride, ...), decoded from the pools' types.
template <KvType KT, KvType VT>
__device__ __forceinline__ void gather_rows(const AttentionShape& s, const KvPages& kv, size_t kv_len, size_t first,
                                            size_t stride, __nv_bfloat162* k16, __nv_bfloat162* v16) {
  const size_t row = s.n_kv_heads * s.head_dim, half = row / 2;
  const detail::KvRead<KT> K = detail::kv_read<KT>(kv.k_pool, s.kv_row_stride);
  const detail::KvRead<VT> V = detail::kv_read<VT>(kv.v_pool, s.kv_row_stride);
  for (size_t e = first; e < kv_len * half; e += stride) {
    const size_t tau = e / half, c = (e % half) * 2;
    const size_t r = cpu::kv_pool_row(kv.block_table, kv.block_size, tau);
    k16[e] = __floats2bfloat162_rn(K.at(r, c), K.at(r, c + 1));
    v16[e] = __floats2bfloat162_rn(V.at(r, c), V.at(r, c + 1));
  }
}

template <KvType KT, KvType VT>
__global__ void gather_kv_bf16(AttentionShape s, KvPages kv, __nv_bfloat162* k16, __nv_bfloat162* v16) {
  gather_rows<KT, VT>(s, kv, s.kv_len, detail::global_thread(), detail::global_threads(), k16, v16);
}

// A batch's sequences: grid y = sequence, its blocks along x stride over its rows.
template <KvType KT, KvType VT>
__global__ void gather_kv_bf16_batch(AttentionShape s, KvPages pools, const detail::PrefillGather* gathers,
                                     const int32_t* tables, __nv_bfloat162* k16, __nv_bfloat162* v16) {
  const detail::PrefillGather g = gathers[blockIdx.y];
  KvPages kv = pools;
  kv.block_table = tables + g.table;
  const size_t half = s.n_kv_heads * s.head_dim / 2, base = g.kv_base * half;
  gather_rows<KT, VT>(s, kv, g.kv_len, size_t{blockIdx.x} * blockDim.x + threadIdx.x, size_t{gridDim.x} * blockDim.x,
                      k16 + base, v16 + base);
}

template <int D>
struct Tile {
  static constexpr int kLd = D + 8;  // bf16 row + 16 bytes: ldmatrix rows hit distinct banks
  static constexpr size_t kSmemBytes = size_t{kBq + 2 * kBk} * kLd * sizeof(__nv_bfloat16);
};

// Rows [r0, r0 + kBk) of a [kv_len][row] bf16 array (head offset applied) into a smem tile.
template <int D>
__device__ void load_kv_tile(const __nv_bfloat16* src, size_t row, size_t r0, size_t kv_len, __nv_bfloat16* dst) {
  constexpr int kChunks = D / 8;  // 16-byte pieces per row
  for (int e = static_cast<int>(threadIdx.x); e < kBk * kChunks; e += kThreads) {
    const int r = e / kChunks, c = (e % kChunks) * 8;
    const bool valid = r0 + r < kv_len;
    cp_async16(smem_u32(dst + r * Tile<D>::kLd + c), src + (valid ? (r0 + r) * row : 0) + c, valid);
  }
}

// Query tile t0 .. t0+63 of one (sequence, head h) over its bf16 rows: the body of both kernels
// below, so a sequence's bits do not depend on whether it ran alone or in a batch.
template <int D>
__device__ __forceinline__ void tc_tile(const AttentionShape& s, const float* q, const __nv_bfloat16* k16,
                                        const __nv_bfloat16* v16, float scale, float* out, size_t t0, size_t h) {
  constexpr int kLd = Tile<D>::kLd, kNT = D / 8;  // output n8 tiles per warp
  extern __shared__ __align__(16) unsigned char smem_raw[];
  auto* Qs = reinterpret_cast<__nv_bfloat16*>(smem_raw);  // [kBq][kLd] scaled queries
  __nv_bfloat16* Ks = Qs + kBq * kLd;                     // [kBk][kLd]
  __nv_bfloat16* Vs = Ks + kBk * kLd;                     // [kBk][kLd]
  const int tid = static_cast<int>(threadIdx.x), warp = tid / 32, lane = tid % 32;
  const int g = lane / 4, qd = lane % 4;
  const size_t kvh = h / (s.n_heads / s.n_kv_heads);
  const size_t first_row = s.kv_len - s.n_q_tokens;
  const size_t rows = s.n_q_tokens - t0 < size_t{kBq} ? s.n_q_tokens - t0 : size_t{kBq};
  const size_t row_elems = s.n_kv_heads * D;
  const __nv_bfloat16* kh = k16 + kvh * D;
  const __nv_bfloat16* vh = v16 + kvh * D;
  const size_t n_keys = first_row + t0 + rows;

  load_kv_tile<D>(kh, row_elems, 0, n_keys, Ks);
  cp_async_commit();
  load_kv_tile<D>(vh, row_elems, 0, n_keys, Vs);
  cp_async_commit();
  for (int e = tid; e < kBq * D / 2; e += kThreads) {
    const int r = e / (D / 2), c = (e % (D / 2)) * 2;
    float a = 0.0f, b = 0.0f;
    if (static_cast<size_t>(r) < rows) {
      const float* qr = q + (t0 + r) * s.q_token_stride + h * s.q_head_stride + c;
      a = qr[0] * scale;
      b = qr[1] * scale;
    }
    *reinterpret_cast<__nv_bfloat162*>(Qs + r * kLd + c) = __floats2bfloat162_rn(a, b);
  }

  // This thread's query rows (fragment rows g and g + 8 of the warp's 16) and their last visible key.
  size_t last[2];
#pragma unroll
  for (int x = 0; x < 2; ++x) {
    const size_t r = static_cast<size_t>(warp * 16 + g + 8 * x);
    last[x] = first_row + t0 + (r < rows ? r : rows - 1);
  }
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  float o[kNT][4];
#pragma unroll
  for (int n = 0; n < kNT; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) o[n][e] = 0.0f;

  const int a_row = lane % 16, a_col = (lane / 16) * 8;
  const int b_row = (lane % 8) + 8 * (lane / 16), b_col = ((lane / 8) % 2) * 8;
  const int v_row = (lane % 8) + 8 * ((lane / 8) % 2), v_col = (lane / 16) * 8;
  const __nv_bfloat16* q_warp = Qs + warp * 16 * kLd;

  for (size_t k0 = 0; k0 < n_keys; k0 += kBk) {
    const bool more = k0 + kBk < n_keys;
    cp_async_wait<1>();  // K of this tile (V may still be in flight)
    __syncthreads();

    float sc[kBk / 8][4];
#pragma unroll
    for (int n = 0; n < kBk / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) sc[n][e] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < D; kk += 16) {
      uint32_t af[4];
      ldmatrix_x4(smem_u32(q_warp + a_row * kLd + kk + a_col), af[0], af[1], af[2], af[3]);
#pragma unroll
      for (int nj = 0; nj < kBk / 16; ++nj) {
        uint32_t b0, b1, b2, b3;
        ldmatrix_x4(smem_u32(Ks + (nj * 16 + b_row) * kLd + kk + b_col), b0, b1, b2, b3);
        mma_bf16(sc[2 * nj], af, b0, b1);
        mma_bf16(sc[2 * nj + 1], af, b2, b3);
      }
    }
    __syncthreads();  // every warp is done with K
    if (more) load_kv_tile<D>(kh, row_elems, k0 + kBk, n_keys, Ks);
    cp_async_commit();  // (possibly empty) group: keeps the wait counts uniform

    // Online softmax over the fragment: rows g (e = 0, 1) and g + 8 (e = 2, 3), 4 lanes per row.
    float corr[2];
#pragma unroll
    for (int x = 0; x < 2; ++x) {
      float mx = -INFINITY;
#pragma unroll
      for (int n = 0; n < kBk / 8; ++n)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const size_t key = k0 + n * 8 + 2 * qd + e;
          if (key > last[x]) sc[n][2 * x + e] = -INFINITY;  // causal mask (and keys past kv_len)
          mx = fmaxf(mx, sc[n][2 * x + e]);
        }
      mx = fmaxf(mx, __shfl_xor_sync(0xFFFFFFFFu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xFFFFFFFFu, mx, 2));
      const float m_new = fmaxf(m[x], mx);  // finite: key 0 is visible to every row in the first tile
      corr[x] = expf(m[x] - m_new);
      float sum = 0.0f;
#pragma unroll
      for (int n = 0; n < kBk / 8; ++n)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float p = expf(sc[n][2 * x + e] - m_new);
          sc[n][2 * x + e] = p;
          sum += p;
        }
      sum += __shfl_xor_sync(0xFFFFFFFFu, sum, 1);
      sum += __shfl_xor_sync(0xFFFFFFFFu, sum, 2);
      l[x] = l[x] * corr[x] + sum;
      m[x] = m_new;
    }
#pragma unroll
    for (int n = 0; n < kNT; ++n) {
      o[n][0] *= corr[0];
      o[n][1] *= corr[0];
      o[n][2] *= corr[1];
      o[n][3] *= corr[1];
    }

    cp_async_wait<1>();  // V of this tile (the next K may still be in flight)
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kBk / 16; ++kk) {  // P fragment for keys kk*16 .. +15 from two n8 score tiles
      const uint32_t pa[4] = {pack_bf16(sc[2 * kk][0], sc[2 * kk][1]), pack_bf16(sc[2 * kk][2], sc[2 * kk][3]),
                              pack_bf16(sc[2 * kk + 1][0], sc[2 * kk + 1][1]),
                              pack_bf16(sc[2 * kk + 1][2], sc[2 * kk + 1][3])};
#pragma unroll
      for (int nj = 0; nj < D / 16; ++nj) {
        uint32_t b0, b1, b2, b3;
        ldmatrix_x4_trans(smem_u32(Vs + (kk * 16 + v_row) * kLd + nj * 16 + v_col), b0, b1, b2, b3);
        mma_bf16(o[2 * nj], pa, b0, b1);
        mma_bf16(o[2 * nj + 1], pa, b2, b3);
      }
    }
    __syncthreads();  // every warp is done with V
    if (more) load_kv_tile<D>(vh, row_elems, k0 + kBk, n_keys, Vs);
    cp_async_commit();
  }
  cp_async_wait<0>();

#pragma unroll
  for (int x = 0; x < 2; ++x) {
    const size_t r = static_cast<size_t>(warp * 16 + g + 8 * x);
    if (r >= rows) continue;
    const float inv = 1.0f / l[x];
    float* dst = out + (t0 + r) * s.out_token_stride + h * D;
#pragma unroll
    for (int n = 0; n < kNT; ++n) {
      dst[n * 8 + 2 * qd] = o[n][2 * x] * inv;
      dst[n * 8 + 2 * qd + 1] = o[n][2 * x + 1] * inv;
    }
  }
}

template <int D>
__global__ void __launch_bounds__(kThreads)
    attention_tc_kernel(AttentionShape s, const float* q, const __nv_bfloat16* k16, const __nv_bfloat16* v16,
                        float scale, float* out) {
  tc_tile<D>(s, q, k16, v16, scale, out, size_t{blockIdx.x} * kBq, blockIdx.y);
}

// Block (x, y) = (tile x of the flattened list, head y); `base` holds the batch's heads and strides.
template <int D>
__global__ void __launch_bounds__(kThreads)
    attention_tc_batch_kernel(AttentionShape base, const float* q, const detail::PrefillTile* tiles,
                              const __nv_bfloat16* k16, const __nv_bfloat16* v16, float scale, float* out) {
  const detail::PrefillTile t = tiles[blockIdx.x];
  AttentionShape s = base;
  s.n_q_tokens = t.n_q;
  s.kv_len = t.kv_len;
  const size_t at = t.kv_base * s.n_kv_heads * D;
  tc_tile<D>(s, q + t.q_offset, k16 + at, v16 + at, scale, out + t.out_offset, t.t0, blockIdx.y);
}

template <int D>
cudaError_t launch_batch(const detail::PrefillBatchWork& w, const __nv_bfloat16* k16, const __nv_bfloat16* v16,
                         cudaStream_t stream) {
  const cudaError_t e = cudaFuncSetAttribute(attention_tc_batch_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             static_cast<int>(Tile<D>::kSmemBytes));
  if (e != cudaSuccess) return e;
  const dim3 grid(static_cast<unsigned>(w.n_tiles), static_cast<unsigned>(w.shape.n_heads));
  attention_tc_batch_kernel<D>
      <<<grid, kThreads, Tile<D>::kSmemBytes, stream>>>(w.shape, w.q, w.tiles, k16, v16, w.scale, w.out);
  return detail::launch_status();
}

// Both bf16 copies (K then V, [rows][Hkv * d]) in the per-stream workspace.
cudaError_t bf16_copies(size_t rows, size_t row, cudaStream_t stream, __nv_bfloat16** k16, __nv_bfloat16** v16) {
  const size_t bytes = (rows * row * 2 + 127) / 128 * 128;
  cudaError_t e = cudaSuccess;
  auto* ws = static_cast<unsigned char*>(detail::stream_workspace(2 * bytes, stream, &e));
  if (ws == nullptr) return e;
  *k16 = reinterpret_cast<__nv_bfloat16*>(ws);
  *v16 = reinterpret_cast<__nv_bfloat16*>(ws + bytes);
  return cudaSuccess;
}

template <int D>
cudaError_t launch(const AttentionShape& s, const float* q, const __nv_bfloat16* k16, const __nv_bfloat16* v16,
                   float scale, float* out, cudaStream_t stream) {
  const cudaError_t e = cudaFuncSetAttribute(attention_tc_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             static_cast<int>(Tile<D>::kSmemBytes));
  if (e != cudaSuccess) return e;
  const dim3 grid(static_cast<unsigned>((s.n_q_tokens + kBq - 1) / kBq), static_cast<unsigned>(s.n_heads));
  attention_tc_kernel<D><<<grid, kThreads, Tile<D>::kSmemBytes, stream>>>(s, q, k16, v16, scale, out);
  return detail::launch_status();
}

}  // namespace

bool attention_prefill_tc_applies(const AttentionShape& s, const float* q, const KvPages& kv, const float* out) {
  const size_t d = s.head_dim;
  return (d == 64 || d == 128 || d == 256) && attention_prefill_applies(s, q, kv, out) && s.kv_len > 0;
}

cudaError_t attention_prefill_tc(const AttentionShape& s, const float* q, const KvPages& kv, float scale, float* out,
                                 cudaStream_t stream) {
  if (s.n_q_tokens == 0 || s.n_heads == 0) return cudaSuccess;
  if (!attention_prefill_tc_applies(s, q, kv, out)) return cudaErrorInvalidValue;
  const size_t row = s.n_kv_heads * s.head_dim;
  __nv_bfloat16 *k16 = nullptr, *v16 = nullptr;
  cudaError_t e = bf16_copies(s.kv_len, row, stream, &k16, &v16);
  if (e != cudaSuccess) return e;
  e = detail::with_kv_types(kv.k_type, kv.v_type, [&](auto kt, auto vt) {
    gather_kv_bf16<decltype(kt)::value, decltype(vt)::value>
        <<<detail::grid_for(s.kv_len * row / 2, 256, 132 * 16), 256, 0, stream>>>(
            s, kv, reinterpret_cast<__nv_bfloat162*>(k16), reinterpret_cast<__nv_bfloat162*>(v16));
    return cudaGetLastError();
  });
  if (e != cudaSuccess) return e;
  switch (s.head_dim) {
    case 64:
      return launch<64>(s, q, k16, v16, scale, out, stream);
    case 128:
      return launch<128>(s, q, k16, v16, scale, out, stream);
    default:
      return launch<256>(s, q, k16, v16, scale, out, stream);
  }
}

namespace detail {

cudaError_t launch_prefill_tc_batch(const PrefillBatchWork& w, const PrefillGather* gathers, size_t n_gathers,
                                    size_t kv_rows, size_t max_kv_len, cudaStream_t stream) {
  if (w.n_tiles == 0 || w.shape.n_heads == 0) return cudaSuccess;
  const size_t row = w.shape.n_kv_heads * w.shape.head_dim;
  __nv_bfloat16 *k16 = nullptr, *v16 = nullptr;
  cudaError_t e = bf16_copies(kv_rows, row, stream, &k16, &v16);
  if (e != cudaSuccess) return e;
  // About 16 blocks per SM in all, at most what the longest sequence's rows fill.
  const size_t per_seq = std::max<size_t>(1, 132 * 16 / n_gathers);
  const size_t gx = std::min(per_seq, (max_kv_len * row / 2 + 255) / 256);
  const dim3 grid(static_cast<unsigned>(std::max<size_t>(gx, 1)), static_cast<unsigned>(n_gathers));
  e = with_kv_types(w.pools.k_type, w.pools.v_type, [&](auto kt, auto vt) {
    gather_kv_bf16_batch<decltype(kt)::value, decltype(vt)::value>
        <<<grid, 256, 0, stream>>>(w.shape, w.pools, gathers, w.tables, reinterpret_cast<__nv_bfloat162*>(k16),
                                   reinterpret_cast<__nv_bfloat162*>(v16));
    return cudaGetLastError();
  });
  if (e != cudaSuccess) return e;
  switch (w.shape.head_dim) {
    case 64:
      return launch_batch<64>(w, k16, v16, stream);
    case 128:
      return launch_batch<128>(w, k16, v16, stream);
    default:
      return launch_batch<256>(w, k16, v16, stream);
  }
}

}  // namespace detail
}  // namespace ds::cuda
