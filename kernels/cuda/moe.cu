// The MoE router and expert kernels (kernels/cuda/moe.h explains the two regimes). Every kernel
// is launched through launch_dependent_if_enabled and waits for the previous kernel first: the
// expert ids it needs come from the router, so there is no weight it could prefetch earlier.
#include <algorithm>
#include <climits>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/matmul_fast.h"  // launch_x_to_bf16
#include "kernels/cuda/moe.h"
#include "kernels/cuda/moe_gemm_tc.h"
#include "kernels/cuda/weights.cuh"

namespace ds::cuda {
namespace {

using detail::kWarp;
using detail::WeightRow;

// ---- router: one warp per token ------------------------------------------------------------------

constexpr int kRouteWarps = 4;
constexpr int kRoutePerLane = static_cast<int>(kMoeMaxExperts) / kWarp;  // logits per lane

// (value, index) order of the ranking: larger logit first, the lower index on equal logits. NaN is
// never better, so a NaN logit is never picked while a number is left.
__device__ __forceinline__ bool ranks_before(float va, int ia, float vb, int ib) {
  return va > vb || (va == vb && ia < ib);
}

// The warp's best not-yet-taken logit: index, and its exp (carried along, so no lane indexes its
// register arrays with a runtime value).
struct RouteCandidate {
  float v = -INFINITY;
  int idx = INT_MAX;
  float ex = 0.0f;
};

__device__ __forceinline__ RouteCandidate warp_best(RouteCandidate c) {
#pragma unroll
  for (int off = kWarp / 2; off > 0; off /= 2) {
    RouteCandidate o;
    o.v = __shfl_xor_sync(0xFFFFFFFFu, c.v, off);
    o.idx = __shfl_xor_sync(0xFFFFFFFFu, c.idx, off);
    o.ex = __shfl_xor_sync(0xFFFFFFFFu, c.ex, off);
    if (ranks_before(o.v, o.idx, c.v, c.idx)) c = o;
  }
  return c;
}

// Lane L holds logits L, L + 32, ...; the softmax over all E, then k rounds of a warp arg-max.
// Lane 0 writes p_j = ex_j / sum in slot order, then divides by their sequential sum: the CPU's
// sequence (p normalised over all E first, renormalised over the k).
__global__ void __launch_bounds__(kRouteWarps* kWarp)
    moe_route_kernel(const float* __restrict__ logits, int n_tokens, int n_experts, int k, int32_t* __restrict__ ids,
                     float* __restrict__ weights) {
  detail::wait_for_previous_kernel();
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const int t = static_cast<int>(blockIdx.x) * kRouteWarps + static_cast<int>(threadIdx.x) / kWarp;
  if (t >= n_tokens) return;
  const float* l = logits + static_cast<size_t>(t) * n_experts;
  float v[kRoutePerLane], ex[kRoutePerLane];
  float mx = -INFINITY;
#pragma unroll
  for (int i = 0; i < kRoutePerLane; ++i) {
    const int e = lane + kWarp * i;
    v[i] = e < n_experts ? l[e] : -INFINITY;
    if (e < n_experts) mx = fmaxf(mx, v[i]);
  }
  mx = detail::warp_max(mx);
  float s = 0.0f;
#pragma unroll
  for (int i = 0; i < kRoutePerLane; ++i) {
    ex[i] = lane + kWarp * i < n_experts ? expf(v[i] - mx) : 0.0f;
    s += ex[i];
  }
  const float sum = detail::warp_sum(s);
  uint32_t taken = 0;  // bit i: this lane's logit i is picked
  float picked = 0.0f;
  int32_t* out_ids = ids + static_cast<size_t>(t) * k;
  float* out_w = weights + static_cast<size_t>(t) * k;
  for (int j = 0; j < k; ++j) {
    RouteCandidate c;
#pragma unroll
    for (int i = 0; i < kRoutePerLane; ++i) {
      const int e = lane + kWarp * i;
      if (e < n_experts && ((taken >> i) & 1u) == 0 && ranks_before(v[i], e, c.v, c.idx)) c = {v[i], e, ex[i]};
    }
    c = warp_best(c);
    if (c.idx < n_experts && c.idx % kWarp == lane) taken |= 1u << (c.idx / kWarp);
    const float p = c.ex / sum;
    picked += p;
    if (lane == 0) out_ids[j] = c.idx, out_w[j] = p;
  }
  if (lane != 0) return;
  for (int j = 0; j < k; ++j) out_w[j] /= picked;  // this thread's own stores: program order
}

// ---- experts -------------------------------------------------------------------------------------

constexpr int kRowWarps = 8;  // warps per block of the row kernels, one output row each
constexpr int kCols = 8;      // columns per lane per step of a dot product
constexpr int kStepCols = kWarp * kCols;

struct MoeArgs {
  const float* x = nullptr;
  const int32_t* experts = nullptr;
  const float* weights = nullptr;
  const uint8_t* gate = nullptr;
  const uint8_t* up = nullptr;
  const uint8_t* down = nullptr;
  size_t gate_row_bytes = 0, down_row_bytes = 0;  // up shares gate's type and rows
  const float* shared = nullptr;
  const float* shared_gate = nullptr;
  float* y = nullptr;
  float* h = nullptr;     // [P][F]: silu(gate) * up per pair
  float* part = nullptr;  // [P][D]: down rows per pair (grouped regime)
  // Grouped regime, written by the sort and read by the row kernels:
  int32_t* tile_expert = nullptr;  // [max tiles] the expert of each tile, -1: unused
  int32_t* tile_pairs = nullptr;   // [max tiles][tile pairs] pair indices, -1: padding
  int n_tokens = 0, n_experts = 0, k = 0, dim = 0, ffn = 0;
  // The bf16 tensor-core products (moe_gemm_tc.h) instead of the f32 tiles: then tiles hold
  // kMoeTcTilePairs pairs, h holds bf16 rows and xb the tokens' x rows in bf16.
  bool tc = false;
  __nv_bfloat16* xb = nullptr;  // [T][D]
};

__device__ __forceinline__ void load_x8(const float* p, float (&x)[kCols]) {
  const float4 a = __ldg(reinterpret_cast<const float4*>(p)), b = __ldg(reinterpret_cast<const float4*>(p) + 1);
  x[0] = a.x, x[1] = a.y, x[2] = a.z, x[3] = a.w, x[4] = b.x, x[5] = b.y, x[6] = b.z, x[7] = b.w;
}

// acc += w . x over one step's 8 columns, in column order: the one dot sequence of every regime.
__device__ __forceinline__ float dot8(const float (&w)[kCols], const float (&x)[kCols], float acc) {
#pragma unroll
  for (int q = 0; q < kCols; ++q) acc = fmaf(w[q], x[q], acc);
  return acc;
}

// The combine sequence of both regimes: slot j's down row d added as fma(w_j, d, acc) in slot order
// from acc = 0 (a slot with an out-of-range expert skipped), then the gated shared expert's row.
__device__ __forceinline__ bool slot_valid(const MoeArgs& a, int p) {
  const int e = a.experts[p];
  return e >= 0 && e < a.n_experts;
}
__device__ __forceinline__ float add_shared(const MoeArgs& a, int t, int r, float acc) {
  if (a.shared == nullptr) return acc;
  return fmaf(detail::sigmoid(a.shared_gate[t]), a.shared[static_cast<size_t>(t) * a.dim + r], acc);
}

// The expert and pair slots of tile `tile`: in the gather regime tile i is pair i alone; in the
// grouped regime the sorted tiles. False when the tile is unused or its expert is out of range.
template <int NP>
__device__ __forceinline__ bool tile_of(const MoeArgs& a, int tile, int& e, int (&pair)[NP]) {
  if constexpr (NP == 1) {
    pair[0] = tile;
    e = a.experts[tile];
  } else {
    e = a.tile_expert[tile];
#pragma unroll
    for (int s = 0; s < NP; ++s) pair[s] = a.tile_pairs[static_cast<size_t>(tile) * NP + s];
  }
  return e >= 0 && e < a.n_experts;
}

// h[p][r] = silu(gate_e[r] . x[t]) * (up_e[r] . x[t]) for the tile's pairs p (token t = p / k):
// grid (tiles, ceil(F / kRowWarps)), one row per warp.
template <GgmlType W, int NP>
__global__ void __launch_bounds__(kRowWarps* kWarp) moe_gate_up_kernel(MoeArgs a) {
  detail::wait_for_previous_kernel();
  int e = 0, pair[NP];
  if (!tile_of<NP>(a, static_cast<int>(blockIdx.x), e, pair)) return;
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const int r = static_cast<int>(blockIdx.y) * kRowWarps + static_cast<int>(threadIdx.x) / kWarp;
  if (r >= a.ffn) return;
  const size_t D = static_cast<size_t>(a.dim), row = static_cast<size_t>(e) * a.ffn + r;
  const uint8_t* gw = a.gate + row * a.gate_row_bytes;
  const uint8_t* uw = a.up + row * a.gate_row_bytes;
  float ag[NP], au[NP];
#pragma unroll
  for (int s = 0; s < NP; ++s) ag[s] = 0.0f, au[s] = 0.0f;
  for (size_t c = static_cast<size_t>(lane) * kCols; c < D; c += kStepCols) {
    float wg[kCols], wu[kCols];
    WeightRow<W>::eight(gw, c, D, wg);
    WeightRow<W>::eight(uw, c, D, wu);
#pragma unroll
    for (int s = 0; s < NP; ++s) {
      if (pair[s] < 0) continue;
      float xv[kCols];
      load_x8(a.x + static_cast<size_t>(pair[s] / a.k) * D + c, xv);
      ag[s] = dot8(wg, xv, ag[s]);
      au[s] = dot8(wu, xv, au[s]);
    }
  }
#pragma unroll
  for (int s = 0; s < NP; ++s) {
    if (pair[s] < 0) continue;  // warp-uniform: every lane holds the same pair list
    const float g = detail::warp_sum(ag[s]), u = detail::warp_sum(au[s]);
    if (lane == 0) a.h[static_cast<size_t>(pair[s]) * a.ffn + r] = detail::silu(g) * u;
  }
}

// down_e[r] . h[p], one lane's share summed in column order, then the warp tree.
template <GgmlType W>
__device__ __forceinline__ float down_dot(const MoeArgs& a, int e, int r, const float* hp, int lane) {
  const size_t F = static_cast<size_t>(a.ffn);
  const uint8_t* dw = a.down + (static_cast<size_t>(e) * a.dim + r) * a.down_row_bytes;
  float acc = 0.0f;
  for (size_t c = static_cast<size_t>(lane) * kCols; c < F; c += kStepCols) {
    float w[kCols], hv[kCols];
    WeightRow<W>::eight(dw, c, F, w);
    load_x8(hp + c, hv);
    acc = dot8(w, hv, acc);
  }
  return detail::warp_sum(acc);
}

// Gather regime: y[t][r] = sum_j w_j down_e_j[r] . h[t k + j] (+ the shared expert), combined in
// the block so no second launch is needed. One warp per (row, slot) item, so the slots' weight
// rows are read in parallel (a warp walking a token's k slots one after another would leave
// k-fold latency per row); the block's down_rows(k) rows x k slots land in shared memory, then
// one thread per row combines them in slot order. Grid (T, ceil(D / down_rows(k))).
__host__ __device__ constexpr int down_rows(int k) {
  return k >= kRowWarps ? 1 : kRowWarps / k;
}

template <GgmlType W>
__global__ void __launch_bounds__(kRowWarps* kWarp) moe_down_combine_kernel(MoeArgs a) {
  detail::wait_for_previous_kernel();
  __shared__ float d[kRowWarps * kMoeMaxK];  // [row in block][slot]
  const int t = static_cast<int>(blockIdx.x), lane = static_cast<int>(threadIdx.x) % kWarp;
  const int rows = down_rows(a.k), r0 = static_cast<int>(blockIdx.y) * rows;
  for (int item = static_cast<int>(threadIdx.x) / kWarp; item < rows * a.k; item += kRowWarps) {
    const int r = r0 + item / a.k, p = t * a.k + item % a.k;
    if (r >= a.dim || !slot_valid(a, p)) continue;
    const float v = down_dot<W>(a, a.experts[p], r, a.h + static_cast<size_t>(p) * a.ffn, lane);
    if (lane == 0) d[item] = v;
  }
  __syncthreads();
  const int rl = static_cast<int>(threadIdx.x), r = r0 + rl;
  if (rl >= rows || r >= a.dim) return;
  float acc = 0.0f;
  for (int j = 0; j < a.k; ++j) {
    if (slot_valid(a, t * a.k + j)) acc = fmaf(a.weights[t * a.k + j], d[rl * a.k + j], acc);
  }
  a.y[static_cast<size_t>(t) * a.dim + r] = add_shared(a, t, r, acc);
}

// Grouped regime: part[p][r] = down_e[r] . h[p] for the tile's pairs: grid (tiles, ceil(D / kRowWarps)).
template <GgmlType W, int NP>
__global__ void __launch_bounds__(kRowWarps* kWarp) moe_down_kernel(MoeArgs a) {
  detail::wait_for_previous_kernel();
  int e = 0, pair[NP];
  if (!tile_of<NP>(a, static_cast<int>(blockIdx.x), e, pair)) return;
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const int r = static_cast<int>(blockIdx.y) * kRowWarps + static_cast<int>(threadIdx.x) / kWarp;
  if (r >= a.dim) return;
  const size_t F = static_cast<size_t>(a.ffn);
  const uint8_t* dw = a.down + (static_cast<size_t>(e) * a.dim + r) * a.down_row_bytes;
  float acc[NP];
#pragma unroll
  for (int s = 0; s < NP; ++s) acc[s] = 0.0f;
  for (size_t c = static_cast<size_t>(lane) * kCols; c < F; c += kStepCols) {
    float w[kCols];
    WeightRow<W>::eight(dw, c, F, w);
#pragma unroll
    for (int s = 0; s < NP; ++s) {
      if (pair[s] < 0) continue;
      float hv[kCols];
      load_x8(a.h + static_cast<size_t>(pair[s]) * F + c, hv);
      acc[s] = dot8(w, hv, acc[s]);
    }
  }
#pragma unroll
  for (int s = 0; s < NP; ++s) {
    if (pair[s] < 0) continue;
    const float v = detail::warp_sum(acc[s]);
    if (lane == 0) a.part[static_cast<size_t>(pair[s]) * a.dim + r] = v;
  }
}

// Grouped regime: y[t][r] from the pairs' rows in slot order (combine_row), one thread per element.
__global__ void moe_combine_kernel(MoeArgs a) {
  detail::wait_for_previous_kernel();
  const size_t n = static_cast<size_t>(a.n_tokens) * a.dim;
  for (size_t i = detail::global_thread(); i < n; i += detail::global_threads()) {
    const int t = static_cast<int>(i / a.dim), r = static_cast<int>(i % a.dim);
    float acc = 0.0f;
    for (int j = 0; j < a.k; ++j) {
      const int p = t * a.k + j;
      if (slot_valid(a, p)) acc = fmaf(a.weights[p], a.part[static_cast<size_t>(p) * a.dim + r], acc);
    }
    a.y[i] = add_shared(a, t, r, acc);
  }
}

// Grouped regime: a counting sort of the pairs by expert into tiles of NP pairs of one expert, in
// one block. The slots within an expert's tiles are claimed with shared-memory atomics, so their
// order varies from run to run; no bit depends on it (every pair's arithmetic is its own, and
// outputs go to the pair's fixed rows). Expert e's tiles follow expert e - 1's.
constexpr int kSortThreads = 1024;

template <int NP>
__global__ void __launch_bounds__(kSortThreads)
    moe_sort_kernel(const int32_t* __restrict__ experts, int n_pairs, int n_experts, int max_tiles,
                    int32_t* __restrict__ tile_expert, int32_t* __restrict__ tile_pairs) {
  detail::wait_for_previous_kernel();
  __shared__ int count[kMoeMaxExperts];   // pairs per expert
  __shared__ int cursor[kMoeMaxExperts];  // next free slot of its tiles
  const int tid = static_cast<int>(threadIdx.x);
  for (int e = tid; e < n_experts; e += kSortThreads) count[e] = 0;
  for (int i = tid; i < max_tiles; i += kSortThreads) tile_expert[i] = -1;
  for (int i = tid; i < max_tiles * NP; i += kSortThreads) tile_pairs[i] = -1;
  __syncthreads();
  for (int p = tid; p < n_pairs; p += kSortThreads) {
    const int e = experts[p];
    if (e >= 0 && e < n_experts) atomicAdd(&count[e], 1);
  }
  __syncthreads();
  if (tid == 0) {  // E <= 512 serial steps: a few microseconds, once per prefill layer
    int tiles = 0;
    for (int e = 0; e < n_experts; ++e) {
      cursor[e] = tiles * NP;
      tiles += (count[e] + NP - 1) / NP;
    }
  }
  __syncthreads();  // also orders the -1 fills above before the stores below
  for (int p = tid; p < n_pairs; p += kSortThreads) {
    const int e = experts[p];
    if (e < 0 || e >= n_experts) continue;
    const int slot = atomicAdd(&cursor[e], 1);
    tile_pairs[slot] = p;
    if (slot % NP == 0) tile_expert[slot / NP] = e;  // an expert's slots fill from its first tile's start
  }
}

// ---- launchers -----------------------------------------------------------------------------------

// Tiles of np pairs the grouped regime may need: every tile holds at least one pair, and each
// expert leaves at most one partly filled tile.
size_t max_tiles(size_t n_pairs, size_t n_experts, size_t np = kMoeTilePairs) {
  const size_t full = (n_pairs + np - 1) / np + n_experts;
  return full < n_pairs ? full : n_pairs;
}

struct ScratchLayout {
  size_t h = 0, part = 0, tile_expert = 0, tile_pairs = 0, xb = 0, total = 0;  // byte offsets, then the size
};

size_t align256(size_t n) {
  return (n + 255) / 256 * 256;
}

// Tokens per launch sequence: steps past kMoeChunkPairs pairs run in token chunks of this many.
// tc: the tensor-core products, whose chunks are kMoeTcChunkPairs.
size_t chunk_tokens(const cpu::MoeExperts& m, bool tc) {
  const size_t n = (tc ? kMoeTcChunkPairs : kMoeChunkPairs) / m.k;
  return n < m.n_tokens ? n : m.n_tokens;
}

ScratchLayout scratch_layout(const cpu::MoeExperts& m, bool tc) {
  const size_t P = chunk_tokens(m, tc) * m.k;
  ScratchLayout s;
  s.total = align256(P * m.ffn() * sizeof(float));
  if (P <= kMoeGatherMaxPairs) return s;
  // Room for either tile size (the f32 tiles are more, the tensor-core tiles hold more slots).
  const size_t tiles = max_tiles(P, m.n_experts);
  const size_t tc_slots = max_tiles(P, m.n_experts, detail::kMoeTcTilePairs) * detail::kMoeTcTilePairs;
  s.part = s.total;
  s.total += align256(P * m.dim() * sizeof(float));
  s.tile_expert = s.total;
  s.total += align256(tiles * sizeof(int32_t));
  s.tile_pairs = s.total;
  s.total += align256(std::max(tiles * kMoeTilePairs, tc_slots) * sizeof(int32_t));
  s.xb = s.total;
  s.total += align256(chunk_tokens(m, tc) * m.dim() * sizeof(__nv_bfloat16));
  return s;
}

unsigned row_blocks(int rows) {
  return static_cast<unsigned>((rows + kRowWarps - 1) / kRowWarps);
}

template <GgmlType WG, GgmlType WD>
cudaError_t run_gather(const MoeArgs& a, cudaStream_t stream) {
  const int down_blocks = (a.dim + down_rows(a.k) - 1) / down_rows(a.k);
  const int P = a.n_tokens * a.k;
  const dim3 block(kRowWarps * kWarp);
  cudaError_t e = detail::launch_dependent_if_enabled(
      moe_gate_up_kernel<WG, 1>, dim3(static_cast<unsigned>(P), row_blocks(a.ffn)), block, 0, stream, a);
  if (e != cudaSuccess) return e;
  return detail::launch_dependent_if_enabled(
      moe_down_combine_kernel<WD>, dim3(static_cast<unsigned>(a.n_tokens), static_cast<unsigned>(down_blocks)), block,
      0, stream, a);
}

cudaError_t launch_combine(const MoeArgs& a, cudaStream_t stream) {
  const size_t n = static_cast<size_t>(a.n_tokens) * a.dim;
  return detail::launch_dependent_if_enabled(moe_combine_kernel, dim3(detail::grid_for(n, 256)), dim3(256), 0, stream,
                                             a);
}

// The grouped regime on bf16 tensor cores: the sort into tiles of kMoeTcTilePairs, x rounded to
// bf16 once per token (each token's row is gathered by its k pairs), the two products, the combine.
template <GgmlType WG, GgmlType WD>
cudaError_t run_grouped_tc(const MoeArgs& a, cudaStream_t stream) {
  constexpr int NP = detail::kMoeTcTilePairs;
  const int P = a.n_tokens * a.k;
  const size_t tiles = max_tiles(static_cast<size_t>(P), static_cast<size_t>(a.n_experts), NP);
  cudaError_t e =
      detail::launch_dependent_if_enabled(moe_sort_kernel<NP>, dim3(1), dim3(kSortThreads), 0, stream, a.experts, P,
                                          a.n_experts, static_cast<int>(tiles), a.tile_expert, a.tile_pairs);
  if (e != cudaSuccess) return e;
  const size_t D = static_cast<size_t>(a.dim), T = static_cast<size_t>(a.n_tokens);
  e = detail::launch_x_to_bf16(a.x, D, T, D, a.xb, stream, dependent_launches(stream));
  if (e != cudaSuccess) return e;
  detail::MoeTcProblem p;
  p.xb = a.xb;
  p.tile_expert = a.tile_expert;
  p.tile_pairs = a.tile_pairs;
  p.n_tiles = static_cast<int>(tiles);
  p.gate = a.gate, p.up = a.up, p.down = a.down;
  p.gate_row_bytes = a.gate_row_bytes, p.down_row_bytes = a.down_row_bytes;
  p.gate_type = WG, p.down_type = WD;
  p.h = reinterpret_cast<__nv_bfloat16*>(a.h);
  p.part = a.part;
  p.n_experts = a.n_experts, p.k = a.k, p.dim = a.dim, p.ffn = a.ffn;
  if ((e = detail::moe_tc_gate_up(p, stream)) != cudaSuccess) return e;
  if ((e = detail::moe_tc_down(p, stream)) != cudaSuccess) return e;
  return launch_combine(a, stream);
}

template <GgmlType WG, GgmlType WD>
cudaError_t run_grouped(const MoeArgs& a, cudaStream_t stream) {
  if (a.tc) return run_grouped_tc<WG, WD>(a, stream);
  constexpr int NP = static_cast<int>(kMoeTilePairs);
  const int P = a.n_tokens * a.k;
  const unsigned tiles = static_cast<unsigned>(max_tiles(static_cast<size_t>(P), static_cast<size_t>(a.n_experts)));
  cudaError_t e =
      detail::launch_dependent_if_enabled(moe_sort_kernel<NP>, dim3(1), dim3(kSortThreads), 0, stream, a.experts, P,
                                          a.n_experts, static_cast<int>(tiles), a.tile_expert, a.tile_pairs);
  if (e != cudaSuccess) return e;
  const dim3 block(kRowWarps * kWarp);
  e = detail::launch_dependent_if_enabled(moe_gate_up_kernel<WG, NP>, dim3(tiles, row_blocks(a.ffn)), block, 0, stream,
                                          a);
  if (e != cudaSuccess) return e;
  e = detail::launch_dependent_if_enabled(moe_down_kernel<WD, NP>, dim3(tiles, row_blocks(a.dim)), block, 0, stream, a);
  if (e != cudaSuccess) return e;
  return launch_combine(a, stream);
}

template <GgmlType WG, GgmlType WD>
cudaError_t run_typed(const MoeArgs& a, cudaStream_t stream) {
  // A short last chunk of a tensor-core step stays grouped: its tokens' bits must not depend on
  // where the chunks of their step end (the f32 regimes agree bit for bit, bf16 and f32 do not).
  if (!a.tc && static_cast<size_t>(a.n_tokens) * a.k <= kMoeGatherMaxPairs) return run_gather<WG, WD>(a, stream);
  return run_grouped<WG, WD>(a, stream);
}

// The down matrix's type picks the second template argument.
template <GgmlType WG>
cudaError_t run_down_typed(GgmlType down, const MoeArgs& a, cudaStream_t stream) {
  switch (down) {
    case GgmlType::Q8_0:
      return run_typed<WG, GgmlType::Q8_0>(a, stream);
    case GgmlType::Q8_0_SPLIT:
      return run_typed<WG, GgmlType::Q8_0_SPLIT>(a, stream);
    default:
      return cudaErrorNotSupported;
  }
}

bool shape_ok(const cpu::MoeExperts& m) {
  if (cpu::moe_experts_problem(m) != nullptr || m.n_experts > kMoeMaxExperts || m.k > kMoeMaxK) return false;
  if (m.dim() % detail::kQ8Block != 0 || m.ffn() % detail::kQ8Block != 0) return false;
  if (!detail::aligned_to(m.x, 16) || m.n_tokens * m.k > static_cast<size_t>(INT_MAX) / 16) return false;
  return m.dim() <= 65535 && m.ffn() <= size_t{65535} * kRowWarps;  // grid.y of the row kernels
}

// The kernels' arguments for tokens [t0, t0 + n) of m (rows of a token are independent, so a
// chunk computes exactly the bits the whole step would).
MoeArgs chunk_args(const cpu::MoeExperts& m, const ScratchLayout& s, uint8_t* base, size_t t0, size_t n) {
  const size_t D = m.dim(), k = m.k;
  MoeArgs a;
  a.x = m.x + t0 * D;
  a.experts = m.experts + t0 * k;
  a.weights = m.weights + t0 * k;
  a.gate = static_cast<const uint8_t*>(m.gate_exps.data);
  a.up = static_cast<const uint8_t*>(m.up_exps.data);
  a.down = static_cast<const uint8_t*>(m.down_exps.data);
  a.gate_row_bytes = m.gate_exps.row_bytes;
  a.down_row_bytes = m.down_exps.row_bytes;
  a.shared = m.shared != nullptr ? m.shared + t0 * D : nullptr;
  a.shared_gate = m.shared != nullptr ? m.shared_gate + t0 : nullptr;
  a.y = m.y + t0 * D;
  a.h = reinterpret_cast<float*>(base + s.h);
  a.part = s.part != 0 ? reinterpret_cast<float*>(base + s.part) : nullptr;
  a.tile_expert = reinterpret_cast<int32_t*>(base + s.tile_expert);
  a.tile_pairs = reinterpret_cast<int32_t*>(base + s.tile_pairs);
  a.xb = s.xb != 0 ? reinterpret_cast<__nv_bfloat16*>(base + s.xb) : nullptr;
  a.n_tokens = static_cast<int>(n);
  a.n_experts = static_cast<int>(m.n_experts);
  a.k = static_cast<int>(k);
  a.dim = static_cast<int>(D);
  a.ffn = static_cast<int>(m.ffn());
  return a;
}

// One chunk's launches, dispatched on the gate/up and the down matrices' types.
cudaError_t run_chunk(const cpu::MoeExperts& m, const MoeArgs& a, cudaStream_t stream) {
  switch (m.gate_exps.type) {
    case GgmlType::Q8_0:
      return run_down_typed<GgmlType::Q8_0>(m.down_exps.type, a, stream);
    case GgmlType::Q8_0_SPLIT:
      return run_down_typed<GgmlType::Q8_0_SPLIT>(m.down_exps.type, a, stream);
    default:
      return cudaErrorNotSupported;
  }
}

// Whether a grouped step of m runs on tensor cores in this precision mode.
bool uses_tc(const cpu::MoeExperts& m, MatmulPrecision precision) {
  return precision == MatmulPrecision::kBf16TensorCores &&
         detail::moe_tc_applies(m.gate_exps.type, m.down_exps.type, m.dim(), m.ffn());
}

}  // namespace

cudaError_t moe_route(const float* logits, size_t n_tokens, size_t n_experts, size_t k, int32_t* experts,
                      float* weights, cudaStream_t stream) {
  if (n_experts == 0 || n_experts > kMoeMaxExperts || k == 0 || k > kMoeMaxK || k > n_experts) {
    return cudaErrorInvalidValue;
  }
  if (n_tokens == 0) return cudaSuccess;
  if (n_tokens > static_cast<size_t>(INT_MAX) || !detail::f32_ok(logits) || experts == nullptr ||
      !detail::f32_ok(weights)) {
    return cudaErrorInvalidValue;
  }
  const unsigned grid = static_cast<unsigned>((n_tokens + kRouteWarps - 1) / kRouteWarps);
  return detail::launch_dependent_if_enabled(moe_route_kernel, dim3(grid), dim3(kRouteWarps * kWarp), 0, stream, logits,
                                             static_cast<int>(n_tokens), static_cast<int>(n_experts),
                                             static_cast<int>(k), experts, weights);
}

size_t moe_experts_scratch_bytes(const cpu::MoeExperts& m, MatmulPrecision precision) {
  return scratch_layout(m, uses_tc(m, precision)).total;
}

cudaError_t moe_experts(const cpu::MoeExperts& m, void* scratch, cudaStream_t stream, MatmulPrecision precision) {
  if (m.n_tokens == 0) return cpu::moe_experts_problem(m) == nullptr ? cudaSuccess : cudaErrorInvalidValue;
  if (!shape_ok(m) || scratch == nullptr) return cudaErrorInvalidValue;
  const bool tc = uses_tc(m, precision);
  const ScratchLayout s = scratch_layout(m, tc);
  const size_t chunk = chunk_tokens(m, tc);
  for (size_t t0 = 0; t0 < m.n_tokens; t0 += chunk) {
    const size_t n = m.n_tokens - t0 < chunk ? m.n_tokens - t0 : chunk;
    MoeArgs a = chunk_args(m, s, static_cast<uint8_t*>(scratch), t0, n);
    a.tc = tc && a.xb != nullptr;  // the grouped regime only (the layout has xb exactly then)
    const cudaError_t e = run_chunk(m, a, stream);
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

}  // namespace ds::cuda
