// Split-K attention for decode (see attention_decode.h).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/attention_decode.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/device_info.h"
#include "kernels/cuda/kv_codec.cuh"
#include "kernels/cuda/matmul_fast.h"  // stream_workspace

namespace ds::cuda::detail {
namespace {

constexpr int kWarps = 8, kThreads = kWarps * kWarp;
constexpr int kSub = 64;  // keys scored per round
constexpr int kMaxHeadDim = static_cast<int>(kMaxAttentionHeadDim);
constexpr int kPerLane = kMaxHeadDim / kWarp;  // 8 head dims per lane
constexpr int kGroup = static_cast<int>(kDecodeMaxGroup);
constexpr size_t kMinKeysPerSplit = 32;  // below this a split costs more than it saves
constexpr size_t kMaxSplits = 256;
static_assert(kThreads >= static_cast<int>(kMaxAttentionHeadDim), "one thread per head dim in the V pass");

// How many splits a query token with kv_len cache rows gets, and how many keys each: enough for
// ~2 blocks per SM over the `pairs` (kv head, query token) of a launch, each split >= 32 keys.
// Every query token is planned with pairs = n_kv_heads, as if it ran alone: a token's split
// boundaries, hence its bits, are the same in a decode step of one sequence, in a batch, and as
// one of a speculative verify row's tokens.
struct SplitPlan {
  size_t n_splits, chunk;
};
__host__ __device__ inline SplitPlan split_plan(size_t kv_len, size_t pairs, int sm_count) {
  const size_t want = (2 * static_cast<size_t>(sm_count) + pairs - 1) / pairs;
  const size_t most = (kv_len + kMinKeysPerSplit - 1) / kMinKeysPerSplit;
  size_t n_splits = want < most ? want : most;
  if (n_splits > kMaxSplits) n_splits = kMaxSplits;
  if (n_splits < 1) n_splits = 1;
  return SplitPlan{n_splits, (kv_len + n_splits - 1) / n_splits};
}

// Where the splits' partial results live: acc [item][H][its splits][d], then (max, sum) in the
// same order, two floats each.
struct Partials {
  float* acc;
  float* ml;
};

// One sequence of a batch as the device reads it (packed by the host, uploaded with the tables).
struct BatchSeq {
  unsigned long long q_offset, out_offset;  // floats from Work::q / Work::out
  unsigned long long part;                  // its first partial (head 0, split 0), from the launch's first
  unsigned int kv_len, table;               // table: its first entry in Work::tables
  unsigned int chunk, n_splits;             // its split plan (split_plan)
};

// What a launch works on: the query tokens of one sequence (seqs == nullptr; grid z = token), or
// one-token sequences of a batch (grid z = sequence). Both run the same kernels, which is what
// makes a batched sequence's bits equal to its one-sequence call.
struct Work {
  const float* q;
  float* out;
  // one sequence: token z sees kv_len - n_q_tokens + z + 1 keys, planned by split_plan alone
  const int32_t* table;
  size_t kv_len, n_q_tokens, q_token_stride, out_token_stride;
  int sm_count;
  // batch
  const BatchSeq* seqs;
  const int32_t* tables;
};

// Grid z-index `z` of `w`: its query row, keys, split plan, partials and output row.
struct Item {
  const float* q;
  const int32_t* table;
  size_t n_keys, chunk, n_splits, part;
  float* out;
};

__device__ Item item_of(const Work& w, size_t z, const cpu::AttentionShape& s) {
  if (w.seqs == nullptr) {
    const size_t first_keys = w.kv_len - w.n_q_tokens + 1;  // causal: token z sees first_keys + z
    size_t part = 0;                                        // the earlier tokens' partials
    for (size_t t = 0; t < z; ++t) part += s.n_heads * split_plan(first_keys + t, s.n_kv_heads, w.sm_count).n_splits;
    const SplitPlan plan = split_plan(first_keys + z, s.n_kv_heads, w.sm_count);
    return Item{w.q + z * w.q_token_stride,    w.table, first_keys + z, plan.chunk, plan.n_splits, part,
                w.out + z * w.out_token_stride};
  }
  const BatchSeq& b = w.seqs[z];
  return Item{w.q + b.q_offset, w.tables + b.table, b.kv_len, b.chunk, b.n_splits, b.part, w.out + b.out_offset};
}

struct SplitState {  // per query head of the group, in shared memory
  float mx[kGroup], sum[kGroup], corr[kGroup];
};

// Scores of the round's nk keys against the group's queries, scaled, into p[j][i]: warp w takes
// keys w, w+8, ..., loading kBatch K rows before reducing any (several loads in flight). Lane l
// holds head dims 8l .. 8l+7 (KvRead::at8: one scale and 2-4 word loads per key for the 8-bit and
// 16-bit types, not one load per value); a head_dim that is not a multiple of 8 reads value by
// value. The queries come from shared memory (qs[j][c], zero past head_dim): held in registers
// (64 per lane at a group of 8) they made the kernel spill.
constexpr int kBatch = 4;
template <KvType KT>
__device__ void load_key_dims(const cpu::AttentionShape& s, const KvRead<KT>& K, size_t row, size_t head_off, int lane,
                              bool vector, float (&v)[kPerLane]) {
  const size_t c0 = static_cast<size_t>(lane) * kPerLane;
  if (vector && c0 + kPerLane <= s.head_dim) {
    K.at8(row, head_off + c0, v);
    return;
  }
#pragma unroll
  for (int e = 0; e < kPerLane; ++e) v[e] = c0 + e < s.head_dim ? K.at(row, head_off + c0 + e) : 0.0f;
}

template <KvType KT>
__device__ void score_keys(const cpu::AttentionShape& s, const KvRead<KT>& K, const size_t* rows, size_t head_off,
                           int nk, const float (*qs)[kMaxHeadDim], int group, float scale, float (*p)[kSub]) {
  const int warp = static_cast<int>(threadIdx.x) / kWarp, lane = static_cast<int>(threadIdx.x) % kWarp;
  const bool vector = s.head_dim % kPerLane == 0;
  for (int i0 = warp; i0 < nk; i0 += kBatch * kWarps) {
    float kvv[kBatch][kPerLane];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int i = i0 + b * kWarps;
      if (i < nk) {
        load_key_dims(s, K, rows[i], head_off, lane, vector, kvv[b]);
      } else {
#pragma unroll
        for (int e = 0; e < kPerLane; ++e) kvv[b][e] = 0.0f;
      }
    }
#pragma unroll
    for (int j = 0; j < kGroup; ++j) {
      if (j >= group) break;
      float q[kPerLane];
      const float4* q4 = reinterpret_cast<const float4*>(&qs[j][lane * kPerLane]);
      const float4 a = q4[0], c = q4[1];
      q[0] = a.x, q[1] = a.y, q[2] = a.z, q[3] = a.w, q[4] = c.x, q[5] = c.y, q[6] = c.z, q[7] = c.w;
      float dot[kBatch] = {};
#pragma unroll
      for (int e = 0; e < kPerLane; ++e) {
#pragma unroll
        for (int b = 0; b < kBatch; ++b) dot[b] += q[e] * kvv[b][e];
      }
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        const float d = warp_sum(dot[b]);
        if (lane == 0 && i0 + b * kWarps < nk) p[j][i0 + b * kWarps] = d * scale;
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

// s supplies the head layout (n_heads, n_kv_heads, head_dim, q_head_stride, kv_row_stride), K and
// V the pools, block_size their blocks' rows; each item's block table comes from `w`.
template <KvType KT, KvType VT>
__global__ void __launch_bounds__(kThreads, 2)  // 2 blocks per SM: the grid is sized for that
    split_kernel(cpu::AttentionShape s, Work w, KvRead<KT> K, KvRead<VT> V, size_t block_size, float scale,
                 Partials part) {
  __shared__ __align__(16) float qs[kGroup][kMaxHeadDim];
  __shared__ float p[kGroup][kSub];
  __shared__ size_t rows[kSub];
  __shared__ SplitState st;
  wait_for_previous_kernel();  // may run as a dependent launch (launch below)
  const size_t split = blockIdx.x, g = blockIdx.y;
  const Item it = item_of(w, blockIdx.z, s);
  if (split >= it.n_splits) return;  // a batch's grid has the most splits of any of its sequences
  const int group = static_cast<int>(s.n_heads / s.n_kv_heads);
  const int tid = static_cast<int>(threadIdx.x);
  const size_t k_begin = split * it.chunk, k_end = min(k_begin + it.chunk, it.n_keys);

  for (int x = tid; x < group * kMaxHeadDim; x += kThreads) {
    const int j = x / kMaxHeadDim, c = x % kMaxHeadDim;
    qs[j][c] = static_cast<size_t>(c) < s.head_dim ? it.q[(g * group + j) * s.q_head_stride + c] : 0.0f;
  }
  if (tid < kGroup) {
    st.mx[tid] = -INFINITY;
    st.sum[tid] = 0.0f;
  }
  __syncthreads();  // qs is read by every warp; a split without keys still reads st below
  float acc[kGroup] = {};
  const size_t dim = static_cast<size_t>(tid);
  for (size_t k0 = k_begin; k0 < k_end; k0 += kSub) {
    const int nk = static_cast<int>(min(size_t{kSub}, k_end - k0));
    if (tid < nk) rows[tid] = cpu::kv_pool_row(it.table, block_size, k0 + tid);
    __syncthreads();
    score_keys(s, K, rows, g * s.head_dim, nk, qs, group, scale, p);
    __syncthreads();
    softmax_round(nk, group, p, st);
    __syncthreads();
    if (dim < s.head_dim) {  // V pass: thread per head dim, coalesced V rows
#pragma unroll
      for (int j = 0; j < kGroup; ++j) acc[j] *= j < group ? st.corr[j] : 0.0f;
#pragma unroll 16
      for (int i = 0; i < nk; ++i) {
        const float v = V.at(rows[i], g * s.head_dim + dim);
#pragma unroll
        for (int j = 0; j < kGroup; ++j) acc[j] += (j < group ? p[j][i] : 0.0f) * v;
      }
    }
    __syncthreads();  // p and rows are rewritten next round
  }
#pragma unroll
  for (int j = 0; j < kGroup; ++j) {
    if (j >= group) break;
    const size_t idx = it.part + (g * group + j) * it.n_splits + split;
    if (dim < s.head_dim) part.acc[idx * s.head_dim + dim] = acc[j];
    if (tid == 0) {
      part.ml[2 * idx] = st.mx[j];  // -inf and 0 for a split with no keys
      part.ml[2 * idx + 1] = st.sum[j];
    }
  }
}

// One block per (head, item): out = sum_s acc_s e^(m_s - M) / sum_s l_s e^(m_s - M).
__global__ void __launch_bounds__(kThreads) merge_kernel(cpu::AttentionShape s, Work w, Partials part) {
  wait_for_previous_kernel();  // may run as a dependent launch (launch below)
  const size_t h = blockIdx.x, dim = threadIdx.x;
  const Item it = item_of(w, blockIdx.y, s);
  const size_t base = it.part + h * it.n_splits;
  float m = -INFINITY;
  for (size_t k = 0; k < it.n_splits; ++k) m = fmaxf(m, part.ml[2 * (base + k)]);
  float sum = 0.0f, o = 0.0f;
  for (size_t k = 0; k < it.n_splits; ++k) {
    const float mk = part.ml[2 * (base + k)];
    if (mk == -INFINITY) continue;  // a split past this token's last key
    const float wgt = expf(mk - m);
    sum += part.ml[2 * (base + k) + 1] * wgt;
    if (dim < s.head_dim) o += part.acc[(base + k) * s.head_dim + dim] * wgt;
  }
  if (dim < s.head_dim) it.out[h * s.head_dim + dim] = o / sum;
}

// The split and merge launches over grid z-items [0, n_items) of `w`; `n_partials` partials. Both
// as dependent launches when the stream is switched on (common.cuh launch_dependent_if_enabled):
// each waits before reading anything; the merge reads the split's partials only after its wait.
cudaError_t launch(const cpu::AttentionShape& s, const Work& w, const KvPages& kv, float scale, size_t n_items,
                   size_t max_splits, size_t n_partials, cudaStream_t stream) {
  cudaError_t e = cudaSuccess;
  auto* ws = static_cast<float*>(stream_workspace(n_partials * (s.head_dim + 2) * sizeof(float), stream, &e));
  if (ws == nullptr) return e;
  const Partials part{ws, ws + n_partials * s.head_dim};
  const dim3 grid(static_cast<unsigned>(max_splits), static_cast<unsigned>(s.n_kv_heads),
                  static_cast<unsigned>(n_items));
  const size_t row = s.kv_row_stride;
  e = with_kv_types(kv.k_type, kv.v_type, [&](auto kt, auto vt) {
    constexpr KvType KT = decltype(kt)::value, VT = decltype(vt)::value;
    return launch_dependent_if_enabled(split_kernel<KT, VT>, grid, dim3(kThreads), 0, stream, s, w,
                                       kv_read<KT>(kv.k_pool, row), kv_read<VT>(kv.v_pool, row), kv.block_size, scale,
                                       part);
  });
  if (e != cudaSuccess) return e;
  return launch_dependent_if_enabled(merge_kernel,
                                     dim3(static_cast<unsigned>(s.n_heads), static_cast<unsigned>(n_items)),
                                     dim3(kThreads), 0, stream, s, w, part);
}

}  // namespace

bool attention_decode_applies(const cpu::AttentionShape& s) {
  return s.n_q_tokens >= 1 && s.n_q_tokens <= kDecodeMaxQTokens && s.n_kv_heads > 0 &&
         s.n_heads / s.n_kv_heads <= kDecodeMaxGroup && s.head_dim <= kMaxAttentionHeadDim && s.kv_len >= 1 &&
         s.n_kv_heads <= 65535;
}

cudaError_t attention_decode(const cpu::AttentionShape& s, const float* q, const cpu::KvPages& kv, float scale,
                             float* out, cudaStream_t stream) {
  if (s.kv_len < s.n_q_tokens) return cudaErrorInvalidValue;  // the cache holds the query tokens too
  Work w{};
  w.q = q;
  w.out = out;
  w.table = kv.block_table;
  w.kv_len = s.kv_len;
  w.n_q_tokens = s.n_q_tokens;
  w.q_token_stride = s.q_token_stride;
  w.out_token_stride = s.out_token_stride;
  w.sm_count = current_device_sm_count();
  // Each token planned alone (item_of): the grid has the last token's splits, the most.
  size_t n_partials = 0;
  for (size_t t = 0; t < s.n_q_tokens; ++t) {
    n_partials += s.n_heads * split_plan(s.kv_len - s.n_q_tokens + 1 + t, s.n_kv_heads, w.sm_count).n_splits;
  }
  const size_t max_splits = split_plan(s.kv_len, s.n_kv_heads, w.sm_count).n_splits;
  return launch(s, w, kv, scale, s.n_q_tokens, max_splits, n_partials, stream);
}

}  // namespace ds::cuda::detail

namespace ds::cuda {
namespace {

// A batch's partials live in the per-stream workspace; past this many bytes the batch is cut
// into several launches (each sequence's work, hence its bits, is the same either way).
constexpr size_t kMaxBatchPartialBytes = size_t{128} << 20;
constexpr size_t kMaxGridZ = 65535;
constexpr size_t kMaxPacked = 0xFFFFFFFFu;  // kv_len and table offsets are 32-bit on the device

cudaError_t check_batch(const AttentionBatch& b, const DeviceUpload& upload) {
  if (b.seqs == nullptr || b.q == nullptr || b.out == nullptr || b.k_pool == nullptr || b.v_pool == nullptr ||
      !upload) {
    return cudaErrorInvalidValue;
  }
  for (const void* p : {static_cast<const void*>(b.q), static_cast<const void*>(b.out),
                        static_cast<const void*>(b.k_pool), static_cast<const void*>(b.v_pool)}) {
    if (!detail::aligned_to(p, alignof(float))) return cudaErrorMisalignedAddress;
  }
  if (!attention_decode_batch_applies(b) || b.block_size == 0 || b.q_head_stride < b.head_dim ||
      b.kv_row_stride < b.n_kv_heads * b.head_dim) {
    return cudaErrorInvalidValue;
  }
  for (size_t i = 0; i < b.n_seqs; ++i) {
    if (b.seqs[i].block_table == nullptr || b.seqs[i].kv_len == 0 || b.seqs[i].kv_len > kMaxPacked ||
        b.seqs[i].n_q_tokens != 1) {
      return cudaErrorInvalidValue;
    }
  }
  return cudaSuccess;
}

// Consecutive sequences [first, first + n) launched together; `max_splits` sizes the grid.
struct BatchLaunch {
  size_t first = 0, n = 0, max_splits = 0, n_partials = 0;
};

// The host side of a batch: descriptors [n_seqs] followed by every block table (one upload), and
// how the sequences are cut into launches.
struct PackedBatch {
  std::vector<detail::BatchSeq> seqs;
  std::vector<int32_t> tables;
  std::vector<BatchLaunch> launches;
};

cudaError_t pack(const AttentionBatch& b, PackedBatch* out) {
  const size_t partial_bytes = (b.head_dim + 2) * sizeof(float);
  out->seqs.resize(b.n_seqs);
  out->launches.assign(1, BatchLaunch{});
  const int sm_count = current_device_sm_count();
  for (size_t i = 0; i < b.n_seqs; ++i) {
    const AttentionBatchSeq& in = b.seqs[i];
    const detail::SplitPlan plan = detail::split_plan(in.kv_len, b.n_kv_heads, sm_count);  // as if it ran alone
    const size_t n_partials = b.n_heads * plan.n_splits;
    BatchLaunch* l = &out->launches.back();
    if (l->n > 0 && (l->n == kMaxGridZ || (l->n_partials + n_partials) * partial_bytes > kMaxBatchPartialBytes)) {
      out->launches.push_back(BatchLaunch{i, 0, 0, 0});
      l = &out->launches.back();
    }
    const size_t n_blocks = (in.kv_len + b.block_size - 1) / b.block_size;
    if (out->tables.size() + n_blocks > kMaxPacked) return cudaErrorInvalidValue;
    out->seqs[i] = detail::BatchSeq{in.q_offset,
                                    in.out_offset,
                                    l->n_partials,
                                    static_cast<unsigned>(in.kv_len),
                                    static_cast<unsigned>(out->tables.size()),
                                    static_cast<unsigned>(plan.chunk),
                                    static_cast<unsigned>(plan.n_splits)};
    out->tables.insert(out->tables.end(), in.block_table, in.block_table + n_blocks);
    l->n += 1;
    l->n_partials += n_partials;
    l->max_splits = std::max(l->max_splits, plan.n_splits);
  }
  return cudaSuccess;
}

}  // namespace

bool attention_decode_batch_applies(const AttentionBatch& b) {
  const cpu::AttentionShape one{1, 1, b.n_heads, b.n_kv_heads, b.head_dim, 0, b.q_head_stride, b.kv_row_stride, 0};
  return b.n_heads > 0 && b.n_kv_heads > 0 && b.n_heads % b.n_kv_heads == 0 && b.head_dim > 0 &&
         detail::attention_decode_applies(one);
}

cudaError_t attention_decode_batch(const AttentionBatch& b, const DeviceUpload& upload, cudaStream_t stream) {
  if (b.n_seqs == 0) return cudaSuccess;
  if (const cudaError_t e = check_batch(b, upload); e != cudaSuccess) return e;
  PackedBatch packed;
  if (const cudaError_t e = pack(b, &packed); e != cudaSuccess) return e;

  const size_t desc_bytes = packed.seqs.size() * sizeof(detail::BatchSeq);
  std::vector<unsigned char> bytes(desc_bytes + packed.tables.size() * sizeof(int32_t));
  std::memcpy(bytes.data(), packed.seqs.data(), desc_bytes);
  std::memcpy(bytes.data() + desc_bytes, packed.tables.data(), packed.tables.size() * sizeof(int32_t));
  const auto* dev = static_cast<const unsigned char*>(upload(bytes.data(), bytes.size()));
  if (dev == nullptr) return cudaErrorMemoryAllocation;

  const cpu::AttentionShape s{1, 1, b.n_heads, b.n_kv_heads, b.head_dim, 0, b.q_head_stride, b.kv_row_stride, 0};
  const KvPages kv{b.k_pool, b.v_pool, nullptr, b.block_size, b.k_type, b.v_type};
  for (const BatchLaunch& l : packed.launches) {
    detail::Work w{};
    w.q = b.q;
    w.out = b.out;
    w.seqs = reinterpret_cast<const detail::BatchSeq*>(dev) + l.first;
    w.tables = reinterpret_cast<const int32_t*>(dev + desc_bytes);
    const cudaError_t e = detail::launch(s, w, kv, b.scale, l.n, l.max_splits, l.n_partials, stream);
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

}  // namespace ds::cuda
