#include <cmath>

#include "kernels/cuda/attention_segments.h"
#include "kernels/cuda/common.cuh"

namespace ds::cuda {
namespace {

constexpr int kBq = 64;  // query rows per block
constexpr int kBk = 32;  // key rows per tile
constexpr int kThreads = 256;
constexpr int kGroup = 8;  // threads sharing a pair of query rows (kThreads = kBq / 2 * kGroup)
static_assert(kThreads == kBq / 2 * kGroup && kBk == 4 * kGroup);
constexpr int kLdp = kBk + 1;  // probability rows: consecutive query rows start one bank apart

// Shared-memory row of a head: 16-byte aligned, and consecutive rows start 4 banks apart, so the 8
// threads of a group reading one float4 of 8 different rows hit 32 different banks.
template <int kMaxD>
constexpr int row_floats() {
  return kMaxD + 4;
}

template <int kMaxD>
constexpr size_t smem_bytes() {
  return (size_t{kBq} * row_floats<kMaxD>() + size_t{kBk} * row_floats<kMaxD>() + size_t{kBq} * kLdp) * sizeof(float);
}

__device__ __forceinline__ size_t min_size(size_t a, size_t b) {
  return a < b ? a : b;
}

// Qs[r][0..d) = q * scale of query row t0 + r of head h (zeros past `rows`: they give finite,
// unused scores).
template <int kMaxD>
__device__ void stage_queries(const SegmentAttention& a, size_t t0, int rows, size_t h, float* Qs) {
  const size_t d = a.head_dim, d4 = d / 4;
  for (size_t e = threadIdx.x; e < kBq * d4; e += kThreads) {
    const int r = static_cast<int>(e / d4);
    const size_t i = (e % d4) * 4;
    float4 v = make_float4(0, 0, 0, 0);
    if (r < rows) {
      const float* qr = a.q + (t0 + r) * a.qkv_stride + h * d + i;  // q may be only 4-byte aligned
      v = make_float4(qr[0] * a.scale, qr[1] * a.scale, qr[2] * a.scale, qr[3] * a.scale);
    }
    *reinterpret_cast<float4*>(Qs + r * row_floats<kMaxD>() + i) = v;
  }
}

// dst[kk][0..d) = row k0 + kk of `src` (K or V) at head offset head_off, zeros past kn.
template <int kMaxD>
__device__ void load_key_rows(const float* src, size_t stride, size_t k0, int kn, size_t head_off, size_t d,
                              float* dst) {
  const size_t d4 = d / 4;
  for (size_t e = threadIdx.x; e < kBk * d4; e += kThreads) {
    const int kk = static_cast<int>(e / d4);
    const size_t i = (e % d4) * 4;
    float4 v = make_float4(0, 0, 0, 0);
    if (kk < kn) v = *reinterpret_cast<const float4*>(src + (k0 + kk) * stride + head_off + i);
    *reinterpret_cast<float4*>(dst + kk * row_floats<kMaxD>() + i) = v;
  }
}

// One thread's view of the block: query rows r0, r0 + 1 (r0 = 2 * (tid / 8)); within the group of
// 8 threads (g = tid % 8) score columns g + 8b (b < 4) and output columns 4g + 32j + (0..3). The
// group reduces a row's max and sum with shuffles, so the running (max, sum) of a row sit in the
// same threads as its output accumulators.
template <int kMaxD>
struct RowPair {
  static constexpr int kAccCols = kMaxD / kGroup;
  static_assert(kMaxD % 32 == 0, "output columns come in float4s of 8 threads");
  int r0, g;
  float m[2] = {-INFINITY, -INFINITY};  // running max of the scaled scores
  float l[2] = {0.0f, 0.0f};            // running sum of exp(score - m)
  float acc[2][kAccCols] = {};          // running sum of exp(score - m) * v
};

// Scores of this thread's rows against the key tile Ks (kn valid rows), then the online-softmax
// step: the tile's probabilities into Ps, the running sums rescaled; returns each row's rescale
// factor for the accumulators.
template <int kMaxD>
__device__ __forceinline__ void softmax_step(RowPair<kMaxD>& t, const float* Qs, const float* Ks, int kn, size_t d,
                                             float* Ps, float corr[2]) {
  constexpr int ld = row_floats<kMaxD>();
  float sc[2][4] = {};
  for (size_t i = 0; i < d; i += 4) {
    const float4 qa = *reinterpret_cast<const float4*>(Qs + t.r0 * ld + i);
    const float4 qb = *reinterpret_cast<const float4*>(Qs + (t.r0 + 1) * ld + i);
#pragma unroll
    for (int b = 0; b < 4; ++b) {
      const float4 k = *reinterpret_cast<const float4*>(Ks + (t.g + kGroup * b) * ld + i);
      sc[0][b] += qa.x * k.x + qa.y * k.y + qa.z * k.z + qa.w * k.w;
      sc[1][b] += qb.x * k.x + qb.y * k.y + qb.z * k.z + qb.w * k.w;
    }
  }
#pragma unroll
  for (int x = 0; x < 2; ++x) {
    float mx = -INFINITY;
#pragma unroll
    for (int b = 0; b < 4; ++b) {
      if (t.g + kGroup * b >= kn) sc[x][b] = -INFINITY;  // past the segment's last key
      mx = fmaxf(mx, sc[x][b]);
    }
#pragma unroll
    for (int off = 1; off < kGroup; off *= 2) mx = fmaxf(mx, __shfl_xor_sync(0xFFFFFFFFu, mx, off));
    // Finite: every tile holds at least one key of the segment, visible to every query (non-causal).
    const float m_new = fmaxf(t.m[x], mx);
    corr[x] = expf(t.m[x] - m_new);  // 0 on the first tile (m = -inf)
    float psum = 0.0f;
#pragma unroll
    for (int b = 0; b < 4; ++b) {
      const float p = expf(sc[x][b] - m_new);  // 0 for the masked columns
      Ps[(t.r0 + x) * kLdp + t.g + kGroup * b] = p;
      psum += p;
    }
#pragma unroll
    for (int off = 1; off < kGroup; off *= 2) psum += __shfl_xor_sync(0xFFFFFFFFu, psum, off);
    t.l[x] = t.l[x] * corr[x] + psum;
    t.m[x] = m_new;
  }
}

// acc = acc * corr + P V over the tile's kn value rows Vs. Columns past d are skipped: their
// shared memory was never written.
template <int kMaxD>
__device__ __forceinline__ void accumulate_values(RowPair<kMaxD>& t, const float* Ps, const float* Vs, int kn, size_t d,
                                                  const float corr[2]) {
  constexpr int ld = row_floats<kMaxD>();
#pragma unroll
  for (int x = 0; x < 2; ++x)
#pragma unroll
    for (int c = 0; c < RowPair<kMaxD>::kAccCols; ++c) t.acc[x][c] *= corr[x];
  for (int kk = 0; kk < kn; ++kk) {
    const float p0 = Ps[t.r0 * kLdp + kk], p1 = Ps[(t.r0 + 1) * kLdp + kk];
#pragma unroll
    for (int j = 0; j < kMaxD / 32; ++j) {
      const int c = 4 * t.g + 32 * j;
      if (c >= static_cast<int>(d)) continue;
      const float4 v = *reinterpret_cast<const float4*>(Vs + kk * ld + c);
      t.acc[0][4 * j] += p0 * v.x;
      t.acc[0][4 * j + 1] += p0 * v.y;
      t.acc[0][4 * j + 2] += p0 * v.z;
      t.acc[0][4 * j + 3] += p0 * v.w;
      t.acc[1][4 * j] += p1 * v.x;
      t.acc[1][4 * j + 1] += p1 * v.y;
      t.acc[1][4 * j + 2] += p1 * v.z;
      t.acc[1][4 * j + 3] += p1 * v.w;
    }
  }
}

template <int kMaxD>
__device__ __forceinline__ void write_rows(const RowPair<kMaxD>& t, const SegmentAttention& a, size_t t0, int rows,
                                           size_t h) {
  const size_t d = a.head_dim;
#pragma unroll
  for (int x = 0; x < 2; ++x) {
    if (t.r0 + x >= rows) continue;
    float* o = a.out + (t0 + t.r0 + x) * a.out_stride + h * d;
    const float inv = 1.0f / t.l[x];
#pragma unroll
    for (int j = 0; j < kMaxD / 32; ++j) {
      const int c = 4 * t.g + 32 * j;
      if (c >= static_cast<int>(d)) continue;
      *reinterpret_cast<float4*>(o + c) = make_float4(t.acc[x][4 * j] * inv, t.acc[x][4 * j + 1] * inv,
                                                      t.acc[x][4 * j + 2] * inv, t.acc[x][4 * j + 3] * inv);
    }
  }
}

// Block (x, y, z): query rows [starts[z] + 64x, +64) of segment z, head y, against every key row
// of segment z. Blocks past the segment's end return at once (the grid is sized for the longest).
template <int kMaxD>
__global__ void __launch_bounds__(kThreads) segment_attention_kernel(SegmentAttention a) {
  extern __shared__ __align__(16) float smem[];
  const size_t seg_begin = a.starts[blockIdx.z], seg_end = a.starts[blockIdx.z + 1];
  const size_t t0 = seg_begin + size_t{blockIdx.x} * kBq;
  if (t0 >= seg_end) return;  // the whole block (no barrier reached yet)
  const size_t h = blockIdx.y, d = a.head_dim;
  float* Qs = smem;                             // [kBq][ld] scaled queries
  float* KVs = Qs + kBq * row_floats<kMaxD>();  // [kBk][ld] the key tile, then the value tile
  float* Ps = KVs + kBk * row_floats<kMaxD>();  // [kBq][kLdp] the tile's probabilities
  const int rows = static_cast<int>(min_size(kBq, seg_end - t0));
  RowPair<kMaxD> t;
  t.r0 = 2 * (static_cast<int>(threadIdx.x) / kGroup);
  t.g = static_cast<int>(threadIdx.x) % kGroup;
  stage_queries<kMaxD>(a, t0, rows, h, Qs);
  for (size_t k0 = seg_begin; k0 < seg_end; k0 += kBk) {
    const int kn = static_cast<int>(min_size(kBk, seg_end - k0));
    float corr[2];
    __syncthreads();  // the previous tile's V and P readers are done (first tile: Q is staged)
    load_key_rows<kMaxD>(a.k, a.qkv_stride, k0, kn, h * d, d, KVs);
    __syncthreads();
    softmax_step(t, Qs, KVs, kn, d, Ps, corr);
    __syncthreads();  // K no longer read; P complete
    load_key_rows<kMaxD>(a.v, a.qkv_stride, k0, kn, h * d, d, KVs);
    __syncthreads();
    accumulate_values(t, Ps, KVs, kn, d, corr);
  }
  write_rows(t, a, t0, rows, h);
}

cudaError_t check(const SegmentAttention& a, size_t max_segment_rows) {
  if (a.q == nullptr || a.k == nullptr || a.v == nullptr || a.out == nullptr || a.starts == nullptr) {
    return cudaErrorInvalidValue;
  }
  if (a.head_dim == 0 || a.head_dim % 4 != 0 || a.head_dim > kSegmentAttentionMaxHeadDim) return cudaErrorInvalidValue;
  if (a.n_heads > 65535 || a.n_segments == 0 || a.n_segments > 65535) return cudaErrorInvalidValue;  // grid y, z
  const size_t width = a.n_heads * a.head_dim;
  if (a.qkv_stride < width || a.out_stride < width) return cudaErrorInvalidValue;
  if (max_segment_rows == 0 || max_segment_rows > a.n_tokens) return cudaErrorInvalidValue;
  if ((max_segment_rows + kBq - 1) / kBq > detail::kMaxGridX) return cudaErrorInvalidValue;
  // float4 loads of K / V rows and stores of output rows (head offsets h * head_dim are whole float4s).
  if (!detail::aligned_to(a.k, 16) || !detail::aligned_to(a.v, 16) || !detail::aligned_to(a.out, 16) ||
      a.qkv_stride % 4 != 0 || a.out_stride % 4 != 0 || !detail::aligned_to(a.q, 4) ||
      !detail::aligned_to(a.starts, 4)) {
    return cudaErrorMisalignedAddress;
  }
  return cudaSuccess;
}

template <int kMaxD>
cudaError_t launch(const SegmentAttention& a, size_t max_segment_rows, cudaStream_t stream) {
  constexpr size_t smem = smem_bytes<kMaxD>();
  if (const cudaError_t e = detail::allow_dynamic_smem<segment_attention_kernel<kMaxD>>(smem); e != cudaSuccess) {
    return e;
  }
  const dim3 grid(static_cast<unsigned>((max_segment_rows + kBq - 1) / kBq), static_cast<unsigned>(a.n_heads),
                  static_cast<unsigned>(a.n_segments));
  return detail::launch_maybe_dependent(segment_attention_kernel<kMaxD>, grid, dim3(kThreads), smem, stream, false, a);
}

}  // namespace

// The smallest of 32 / 64 / 96 / 128 that holds the head: the accumulators and shared rows are
// sized for it (the real tower's 72 takes 96, its tiny fixture's 16 takes 32).
cudaError_t attention_segments(const SegmentAttention& a, size_t max_segment_rows, cudaStream_t stream) {
  if (a.n_tokens == 0 || a.n_heads == 0) return cudaSuccess;
  if (const cudaError_t e = check(a, max_segment_rows); e != cudaSuccess) return e;
  if (a.head_dim <= 32) return launch<32>(a, max_segment_rows, stream);
  if (a.head_dim <= 64) return launch<64>(a, max_segment_rows, stream);
  if (a.head_dim <= 96) return launch<96>(a, max_segment_rows, stream);
  return launch<128>(a, max_segment_rows, stream);
}

}  // namespace ds::cuda
