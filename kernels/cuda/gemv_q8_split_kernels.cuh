// Internal: the kernels and launchers of the split-rows decode GEMV (gemv_q8_split.cu explains
// them), shared by production (gemv_q8_split.cu: the dot the shape picks) and the kernel lab
// (tools/kernel_lab/split_variants.cu: either dot forced). Each includer gets its own copy.
#pragma once

#include <algorithm>
#include <type_traits>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/device_info.h"
#include "kernels/cuda/matmul_fast.h"
#include "kernels/cuda/weights.cuh"

namespace ds::cuda::detail {
namespace {

constexpr int kLaneCols = 16;                   // quants of one uint4
constexpr int kSliceCols = kWarp * kLaneCols;   // 512 columns per warp
constexpr int kMaxBlockWarps = 16;              // launch bound (caps registers at 128); geometry() uses <= 12
constexpr int kMaxTokensPerLaunch = 4;          // activations live in registers
constexpr int kRangeRows = 16;                  // rows per range of the persistent loop
constexpr size_t kPartialBytesMax = 48 * 1024;  // shared memory for the (slice, row, token) partials

// ---- the float dot -----------------------------------------------------------------------------

template <int NT>
struct FloatActivations {
  float v[NT][kLaneCols];

  // x, or with `up` the FFN's SwiGLU silu(x) * up (up rows at the same stride): the same f32
  // expression as the swiglu kernel, so the fused product has the bits of swiglu then the GEMV.
  __device__ __forceinline__ void load(const float* __restrict__ x, const float* __restrict__ up, size_t xs, int c) {
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      const float4* xp = reinterpret_cast<const float4*>(x + t * xs + c);
#pragma unroll
      for (int k = 0; k < kLaneCols / 4; ++k) {
        const float4 a = __ldg(xp + k);
        v[t][4 * k] = a.x, v[t][4 * k + 1] = a.y, v[t][4 * k + 2] = a.z, v[t][4 * k + 3] = a.w;
      }
      if (up == nullptr) continue;
      const float4* upp = reinterpret_cast<const float4*>(up + t * xs + c);
#pragma unroll
      for (int k = 0; k < kLaneCols / 4; ++k) {
        const float4 u = __ldg(upp + k);
        v[t][4 * k] = silu(v[t][4 * k]) * u.x;
        v[t][4 * k + 1] = silu(v[t][4 * k + 1]) * u.y;
        v[t][4 * k + 2] = silu(v[t][4 * k + 2]) * u.z;
        v[t][4 * k + 3] = silu(v[t][4 * k + 3]) * u.w;
      }
    }
  }
  // s[t] = sum_k q_k x[t][k], fma in column order.
  __device__ __forceinline__ void dot(const uint4& q, float (&s)[NT]) const {
    const uint32_t words[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
    for (int t = 0; t < NT; ++t) s[t] = 0.0f;
#pragma unroll
    for (int m = 0; m < 4; ++m) {
      float f[4];
      widen_int8x4(words[m], f);
#pragma unroll
      for (int k = 0; k < 4; ++k) {
#pragma unroll
        for (int t = 0; t < NT; ++t) s[t] = __fmaf_rn(f[k], v[t][4 * m + k], s[t]);
      }
    }
  }
};

// ---- the int8x3 dot ----------------------------------------------------------------------------

constexpr int kLevels = 3;
constexpr float kRoundMagic = 12582912.0f;  // 1.5 * 2^23: fma(e, inv, magic) rounds e * inv to an integer
constexpr float kTinyChunk = 1e-30f;

// Low byte of each rounded value (its two's complement int8) packed into one word.
__device__ __forceinline__ uint32_t pack4(const float (&t)[4]) {
  const uint32_t lo = __byte_perm(__float_as_uint(t[0]), __float_as_uint(t[1]), 0x0040u);
  const uint32_t hi = __byte_perm(__float_as_uint(t[2]), __float_as_uint(t[3]), 0x0040u);
  return __byte_perm(lo, hi, 0x5410u);
}

template <int NT>
struct Int8x3Activations {
  uint32_t q[NT][kLevels][kLaneCols / 4];
  float scale[NT][kLevels];

  __device__ __forceinline__ void load(const float* __restrict__ x, const float* __restrict__ up, size_t xs, int c) {
#pragma unroll
    for (int t = 0; t < NT; ++t) {  // one token at a time: 16 floats live, not 16 * NT
      FloatActivations<1> f;
      f.load(x + t * xs, up == nullptr ? nullptr : up + t * xs, 0, c);
      quantize(f.v[0], q[t], scale[t]);
    }
  }

  // x = s1 a + s2 b + s3 c + e. Non-finite inputs give a NaN scale, so the products are NaN (as
  // loud as the float path; never a finite wrong value).
  __device__ __forceinline__ static void quantize(float (&e)[kLaneCols], uint32_t (&out)[kLevels][kLaneCols / 4],
                                                  float (&s)[kLevels]) {
    float m = 0.0f;
    bool finite = true;
#pragma unroll
    for (int k = 0; k < kLaneCols; ++k) {
      m = fmaxf(m, fabsf(e[k]));
      finite = finite && isfinite(e[k]);
    }
    // Chunks below 1e-30 count as zero (every level 0): 127 * 252^2 / m must stay finite.
    float inv = m >= kTinyChunk ? 127.0f / m : 0.0f;
    s[0] = finite ? m / 127.0f : __int_as_float(0x7FC00000);
    s[1] = s[0] / 252.0f;  // |residual| <= s/2 (+ rounding), so residual/s_next <= 126.01: fits int8
    s[2] = s[1] / 252.0f;
#pragma unroll
    for (int l = 0; l < kLevels; ++l) {
#pragma unroll
      for (int j = 0; j < kLaneCols / 4; ++j) {
        float t[4];
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          t[k] = __fmaf_rn(e[4 * j + k], inv, kRoundMagic);
          e[4 * j + k] = __fmaf_rn(-s[l], t[k] - kRoundMagic, e[4 * j + k]);
        }
        out[l][j] = pack4(t);
      }
      inv *= 252.0f;
    }
  }

  // s[t] = sum_k q_k x[t][k] from three exact integer sums.
  __device__ __forceinline__ void dot(const uint4& qw, float (&s)[NT]) const {
    const int words[4] = {static_cast<int>(qw.x), static_cast<int>(qw.y), static_cast<int>(qw.z),
                          static_cast<int>(qw.w)};
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      int acc[kLevels] = {0, 0, 0};
#pragma unroll
      for (int l = 0; l < kLevels; ++l) {
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[l] = __dp4a(words[j], static_cast<int>(q[t][l][j]), acc[l]);
      }
      s[t] = __fmaf_rn(static_cast<float>(acc[2]), scale[t][2],
                       __fmaf_rn(static_cast<float>(acc[1]), scale[t][1], static_cast<float>(acc[0]) * scale[t][0]));
    }
  }
};

// ---- the lane reduction ------------------------------------------------------------------------

// Sums v[0..N) (N rows, a power of two <= 8) over the warp's 32 lanes: halving exchanges at lane
// offsets 16, 8, ... (each lane keeps half the rows) until one row is left, then plain butterflies
// down to offset 1. Every row's total is the same butterfly tree over the lanes (offsets 16, 8, 4,
// 2, 1, in that order) whatever N is, so N does not change the bits. Afterwards lane L holds the
// total of row reduced_row<N>(L); lanes with stored_by<N>(L) write it.
template <int N>
__device__ __forceinline__ int reduced_row(int lane) {
  int row = 0;
#pragma unroll
  for (int half = N / 2, off = 16; half >= 1; half /= 2, off /= 2) row += (lane & off) != 0 ? half : 0;
  return row;
}

template <int N>
__device__ __forceinline__ bool stored_by(int lane) {
  return (lane & (kWarp / N - 1)) == 0;
}

template <int N>
__device__ __forceinline__ float reduce_rows(const float (&v)[N], int lane) {
  float cur[N];
#pragma unroll
  for (int j = 0; j < N; ++j) cur[j] = v[j];
  int off = 16;
#pragma unroll
  for (int half = N / 2; half >= 1; half /= 2, off /= 2) {
    const bool hi = (lane & off) != 0;
#pragma unroll
    for (int j = 0; j < half; ++j) {
      const float recv = __shfl_xor_sync(0xFFFFFFFFu, hi ? cur[j] : cur[j + half], off);
      cur[j] = (hi ? cur[j + half] : cur[j]) + recv;
    }
  }
  float c = cur[0];
#pragma unroll
  for (; off >= 1; off /= 2) c += __shfl_xor_sync(0xFFFFFFFFu, c, off);
  return c;
}

// ---- the kernel --------------------------------------------------------------------------------

// The lane's 16 quants and its block scale of UR consecutive rows from block row r (rows past the
// matrix re-read its last row; never stored).
template <int UR>
struct RowGroup {
  uint4 q[UR];
  uint16_t d[UR];

  __device__ __forceinline__ void load(const uint8_t* __restrict__ quants, const uint8_t* __restrict__ scales,
                                       size_t row_bytes, int r, int last) {
#pragma unroll
    for (int i = 0; i < UR; ++i) {
      const size_t off = static_cast<size_t>(min(r + i, last)) * row_bytes;
      q[i] = __ldcs(reinterpret_cast<const uint4*>(quants + off));
      d[i] = __ldcs(reinterpret_cast<const unsigned short*>(scales + off));
    }
  }
};

template <int NT, int UR, int IR, class Act>
__device__ __forceinline__ void compute_group(const Act& act, const RowGroup<UR>& g, int first, float (&part)[NT][IR]) {
#pragma unroll
  for (int i = 0; i < UR; ++i) {
    float s[NT];
    act.dot(g.q[i], s);
    const float d = half_bits_to_float(g.d[i]);
#pragma unroll
    for (int t = 0; t < NT; ++t) part[t][first + i] = d * s[t];
  }
}

// One (row range, slice): groups of UR rows, the next group's loads in flight while the current
// one is computed (two register buffers; 8 / UR is even so the parity is static). `a` arrives
// holding the range's first group (issued before the activations were loaded).
template <int NT, int UR, int IR, class Act>
__device__ __forceinline__ void run_range(const uint8_t* __restrict__ quants, const uint8_t* __restrict__ scales,
                                          size_t row_bytes, int range_rows, int last, const Act& act, int lane,
                                          RowGroup<UR>& a, float* __restrict__ partials_slice) {
  static_assert(IR % (2 * UR) == 0 && kRangeRows % IR == 0, "two buffers per reduction item");
  RowGroup<UR> b;
  for (int r = 0; r < range_rows; r += IR) {
    float part[NT][IR];
#pragma unroll
    for (int g = 0; g < IR / UR; g += 2) {
      const int next = r + (g + 1) * UR;
      if (next < range_rows) b.load(quants, scales, row_bytes, next, last);
      compute_group<NT, UR, IR>(act, a, g * UR, part);
      if (next + UR < range_rows) a.load(quants, scales, row_bytes, next + UR, last);
      compute_group<NT, UR, IR>(act, b, (g + 1) * UR, part);
    }
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      const float v = reduce_rows<IR>(part[t], lane);
      if (stored_by<IR>(lane)) partials_slice[(r + reduced_row<IR>(lane)) * NT + t] = v;
    }
  }
}

// Where the kernel writes row `row` of token t: one output ([t][ys]) or the row segments of a
// stacked matrix (RowSegments: rows [first[i], first[i+1]) to y[i] + t * ys[i] + row - first[i]).
// Indices are compile-time (unrolled selects), so the struct stays in the parameter space.
struct RowsOut {
  int n = 1;
  int first[kMaxRowSegments + 1] = {};
  float* y[kMaxRowSegments] = {};
  size_t ys[kMaxRowSegments] = {};
  __device__ void store(int t, int row, float v) const {
    float* base = y[0];
    size_t stride = ys[0];
    int first_row = 0;
#pragma unroll
    for (int i = 1; i < kMaxRowSegments; ++i) {
      if (i < n && row >= first[i]) {
        base = y[i];
        stride = ys[i];
        first_row = first[i];
      }
    }
    base[t * stride + (row - first_row)] = v;
  }
};

// `seg` from token t0 on (the launches take up to kMaxTokensPerLaunch tokens each).
RowsOut rows_out_from(const RowSegments& seg, size_t t0) {
  RowsOut o;
  o.n = seg.n;
  for (int i = 0; i <= seg.n; ++i) o.first[i] = static_cast<int>(seg.first[i]);
  for (int i = 0; i < seg.n; ++i) {
    o.y[i] = seg.y[i] + t0 * seg.ys[i];
    o.ys[i] = seg.ys[i];
  }
  return o;
}

// NT tokens (exactly). A persistent grid: block b takes the row ranges b, b + gridDim.x, ... of
// `range_rows` rows each; its blockDim.x / 32 warps split the column slices (warp w: slices w,
// w + warps, ...). When a warp has one slice, its activations are loaded once for all ranges.
// partials[slice][row][token] in dynamic shared memory, summed per row in slice order.
template <int NT, int UR, bool kInt>
__global__ void __launch_bounds__(kMaxBlockWarps* kWarp, 1)
    gemv_q8_split_kernel(const uint8_t* __restrict__ w, int rows, int cols, size_t row_bytes,
                         const float* __restrict__ x, const float* __restrict__ up, size_t xs, const RowsOut out,
                         int range_rows) {
  using Act = std::conditional_t<kInt, Int8x3Activations<NT>, FloatActivations<NT>>;
  extern __shared__ float partials[];
  const int warps = static_cast<int>(blockDim.x) / kWarp;
  const int warp = static_cast<int>(threadIdx.x) / kWarp, lane = static_cast<int>(threadIdx.x) % kWarp;
  const int slices = cols / kSliceCols, n_ranges = (rows + range_rows - 1) / range_rows;
  const bool one_slice = slices <= warps;
  const auto lane_col = [&](int slice) { return slice * kSliceCols + lane * kLaneCols; };
  const auto range_base = [&](int range) { return w + static_cast<size_t>(range) * range_rows * row_bytes; };
  Act act;
  RowGroup<UR> a;
  int range = static_cast<int>(blockIdx.x);
  // The first group's loads go out before the activations are read; launched as a programmatic
  // dependent (pdl), the kernel may start while the previous one still runs: the weights never
  // depend on it, x and y do, so everything after the wait sees the previous kernel complete.
  if (warp < slices) {
    a.load(range_base(range) + lane_col(warp), range_base(range) + cols + 2 * (lane_col(warp) / 32), row_bytes, 0,
           rows - 1 - range * range_rows);
  }
  wait_for_previous_kernel();
  if (warp < slices) act.load(x, up, xs, lane_col(warp));
  for (; range < n_ranges; range += static_cast<int>(gridDim.x)) {
    const int row0 = range * range_rows, last = rows - 1 - row0;
    const uint8_t* base = range_base(range);
    for (int slice = warp; slice < slices; slice += warps) {
      const int c = lane_col(slice);
      if (slice != warp) {  // a later slice of this warp: its first group, then its activations
        a.load(base + c, base + cols + 2 * (c / 32), row_bytes, 0, last);
        act.load(x, up, xs, c);
      }
      run_range<NT, UR, (NT <= 2 ? 8 : 4)>(base + c, base + cols + 2 * (c / 32), row_bytes, range_rows, last, act, lane,
                                           a, partials + slice * range_rows * NT);
    }
    const int next = range + static_cast<int>(gridDim.x);
    if (next < n_ranges && warp < slices) {  // the next range's first group, in flight across the barrier
      const int c = lane_col(warp);
      a.load(range_base(next) + c, range_base(next) + cols + 2 * (c / 32), row_bytes, 0, rows - 1 - next * range_rows);
      if (!one_slice) act.load(x, up, xs, c);
    }
    __syncthreads();
    for (int i = static_cast<int>(threadIdx.x); i < range_rows * NT; i += static_cast<int>(blockDim.x)) {
      const int r = i / NT, t = i % NT;
      if (r > last) continue;
      float sum = 0.0f;
      for (int s = 0; s < slices; ++s) sum += partials[(s * range_rows + r) * NT + t];
      out.store(t, row0 + r, sum);
    }
    __syncthreads();  // the partials are rewritten by the next range
  }
}

// The launch geometry of a shape (never of the token count, so the bits stay batch-invariant).
struct Geometry {
  int slices, warps, range_rows;
  bool int_dot;
};

// Up to kOneSliceMaxWarps slices (6144 columns) a block has a warp per slice and the int8x3 dot
// (activations quantized once per block). Wider rows (the FFN down projections) take the float
// dot and at most 8 warps (ceil(slices / 8) slices each): a 12-warp block of the 128-register
// float kernel left one block, 12 warps, per SM for the 9B ffn_down (54% of HBM). (A 2-warp block
// for the 27B ffn_down's 34 slices, the first try, cost 27B decode 4%.)
constexpr int kOneSliceMaxWarps = 12;

// Which dot a launch uses: the one the shape picks (production), or one forced (the kernel lab's
// variants, tools/kernel_lab/variants_lab.h).
enum class SplitDot { kAuto, kInt8x3, kFloat };

Geometry geometry(int cols, SplitDot dot) {
  Geometry g;
  g.slices = cols / kSliceCols;
  g.warps = g.slices;
  if (g.slices > kOneSliceMaxWarps) {
    const int per_warp = (g.slices + 7) / 8;
    g.warps = (g.slices + per_warp - 1) / per_warp;
  }
  g.range_rows = kRangeRows;
  g.int_dot = dot == SplitDot::kInt8x3 || (dot == SplitDot::kAuto && g.warps == g.slices);
  return g;
}

// Resident blocks per SM of a kernel instance at this block size and shared memory (the
// persistent grid's size); the instance's register count is read once.
template <int NT, int UR, bool kInt>
int blocks_per_sm(int threads, size_t smem) {
  static const int regs = [] {
    cudaFuncAttributes attr{};
    return cudaFuncGetAttributes(&attr, gemv_q8_split_kernel<NT, UR, kInt>) == cudaSuccess ? attr.numRegs : 128;
  }();
  const int warps = threads / kWarp;
  const int reg_units = (regs * kWarp + 255) / 256 * 256;  // registers are allocated per warp in 256s
  int blocks = std::min(65536 / (reg_units * warps), 2048 / threads);
  if (smem > 0) blocks = std::min(blocks, static_cast<int>((227 * 1024) / (smem + 1024)));
  return std::max(1, std::min(blocks, 32));
}

template <int NT, int UR, bool kInt>
cudaError_t launch_kernel(const cpu::WeightView& w, const float* x, const float* up, size_t xs, const RowsOut& out,
                          const Geometry& g, bool pdl, cudaStream_t s) {
  const int rows = static_cast<int>(w.rows), cols = static_cast<int>(w.cols);
  const int threads = g.warps * kWarp, n_ranges = (rows + g.range_rows - 1) / g.range_rows;
  const size_t smem = static_cast<size_t>(g.slices) * g.range_rows * NT * sizeof(float);
  const int grid = std::min(n_ranges, current_device_sm_count() * blocks_per_sm<NT, UR, kInt>(threads, smem));
  return launch_maybe_dependent(gemv_q8_split_kernel<NT, UR, kInt>, dim3(static_cast<unsigned>(grid)),
                                dim3(static_cast<unsigned>(threads)), smem, s, pdl && current_device_is_sm90_or_newer(),
                                static_cast<const uint8_t*>(w.data), rows, cols, w.row_bytes, x, up, xs, out,
                                g.range_rows);
}

template <int NT, int UR>
cudaError_t launch(const cpu::WeightView& w, const float* x, const float* up, size_t xs, const RowsOut& out,
                   const Geometry& g, bool pdl, cudaStream_t s) {
  return g.int_dot ? launch_kernel<NT, UR, true>(w, x, up, xs, out, g, pdl, s)
                   : launch_kernel<NT, UR, false>(w, x, up, xs, out, g, pdl, s);
}

cudaError_t launch_tokens(const cpu::WeightView& w, const float* x, const float* up, size_t xs, size_t n,
                          const RowsOut& out, const Geometry& g, bool pdl, cudaStream_t s) {
  switch (n) {
    case 1:
      return launch<1, 4>(w, x, up, xs, out, g, pdl, s);
    case 2:
      return launch<2, 4>(w, x, up, xs, out, g, pdl, s);
    case 3:
      return launch<3, 2>(w, x, up, xs, out, g, pdl, s);
    case 4:
      return launch<4, 2>(w, x, up, xs, out, g, pdl, s);
    default:
      return cudaErrorInvalidValue;
  }
}

// The dp4a / float GEMV of x (or, with `up`, of silu(x) * up) in launches of up to 4 tokens, its
// rows to `out` (arguments checked by the caller).
cudaError_t run_dot(SplitDot dot, const cpu::WeightView& w, const float* x, const float* up, size_t xs, size_t n,
                    const RowSegments& out, cudaStream_t stream, bool pdl) {
  const Geometry g = geometry(static_cast<int>(w.cols), dot);
  for (size_t t0 = 0; t0 < n; t0 += kMaxTokensPerLaunch) {
    const size_t nt = std::min<size_t>(kMaxTokensPerLaunch, n - t0);
    const cudaError_t e = launch_tokens(w, x + t0 * xs, up == nullptr ? nullptr : up + t0 * xs, xs, nt,
                                        rows_out_from(out, t0), g, pdl, stream);
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

}  // namespace
}  // namespace ds::cuda::detail
