// Device logit digest (see logit_digest.h). Two launches per step, whatever the row count:
//  1. digest_chunks: one block per (2048-logit chunk, row). The block's max and its sum of
//     exp(x - max) in double; each warp its first k candidates in rule order among its 256
//     logits, then warp 0 merges the 8 warps' lists.
//  2. digest_merge: one block per row. logsumexp = M + log(sum_b s_b * exp(m_b - M)) with a
//     fixed-shape tree (deterministic); each warp merges up to 32 chunks' lists, then warp 0 the 8
//     warps' lists: the row's first k.
// Candidate selection is a chain of k dependent rounds, and one block per SM has only 8 warps to
// hide it (the first version, k rounds of block-wide argmins, and its per-warp rewrite were both
// stalled on dependent instructions, not throughput: docs/history/performance-2026-11.md, session 11).
// So a round here is short: every lane holds its candidates sorted, best first (a
// sorting network once, or a sorted list in shared memory), the warp's best head is two redux
// instructions (the largest order key, then the lowest id among lanes holding it), and only the
// winning lane advances.
// Order is total except for NaN, which is never selected; rows with NaN or +inf are flagged
// (the CPU's own order is ill-defined there) and digested on the host from the full row.
#include <algorithm>
#include <cmath>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/logit_digest.h"

namespace ds::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kPerThread = 8;
constexpr size_t kChunk = size_t{kThreads} * kPerThread;
constexpr int kWarps = kThreads / detail::kWarp;

// Where the chunk results live in the scratch buffer (doubles first for alignment).
struct ChunkScratch {
  double* sums;        // [rows][chunks]  sum of exp(x - chunk max)
  float* maxes;        // [rows][chunks]
  int32_t* irregular;  // [rows][chunks]
  float* cand_v;       // [rows][chunks][k]
  int32_t* cand_id;
};

ChunkScratch carve(void* scratch, size_t n_rows, size_t n_chunks, uint32_t k) {
  const size_t cells = n_rows * n_chunks;
  ChunkScratch s;
  s.sums = static_cast<double*>(scratch);
  s.maxes = reinterpret_cast<float*>(s.sums + cells);
  s.irregular = reinterpret_cast<int32_t*>(s.maxes + cells);
  s.cand_v = reinterpret_cast<float*>(s.irregular + cells);
  s.cand_id = reinterpret_cast<int32_t*>(s.cand_v + cells * k);
  return s;
}

// A candidate as the rule orders it: key = the logit's bits mapped so that unsigned order is
// float order (0: no candidate; NaN maps there, so it is never picked; -0 is taken as +0, which
// float comparison ties with it), ties -> the lower id.
struct Cand {
  uint32_t key, id;
};
constexpr Cand kNoCand{0u, 0xFFFFFFFFu};

__device__ __forceinline__ uint32_t order_key(float v) {
  if (isnan(v)) return 0u;
  const uint32_t u = v == 0.0f ? 0u : __float_as_uint(v);
  return (u & 0x80000000u) != 0 ? ~u : u | 0x80000000u;
}
__device__ __forceinline__ float key_value(uint32_t key) {
  return __uint_as_float((key & 0x80000000u) != 0 ? key & 0x7FFFFFFFu : ~key);
}
__device__ __forceinline__ bool before(const Cand& a, const Cand& b) {
  return a.key > b.key || (a.key == b.key && a.id < b.id);
}
__device__ __forceinline__ void order_pair(Cand& a, Cand& b) {  // a, b -> best first
  if (before(b, a)) {
    const Cand t = a;
    a = b;
    b = t;
  }
}

// The warp's best of the lanes' heads, on every lane; *won: this lane holds it.
__device__ __forceinline__ Cand warp_pick(const Cand& head, bool* won) {
  const uint32_t key = __reduce_max_sync(0xFFFFFFFFu, head.key);
  const uint32_t id = __reduce_min_sync(0xFFFFFFFFu, head.key == key ? head.id : 0xFFFFFFFFu);
  *won = key != 0 && head.key == key && head.id == id;
  return Cand{key, id};
}

// Writes pick r of a list: (logit, id), or (0, -1) for none.
__device__ __forceinline__ void put(float* out_v, int32_t* out_id, uint32_t r, const Cand& c) {
  out_v[r] = c.key != 0 ? key_value(c.key) : 0.0f;
  out_id[r] = c.key != 0 ? static_cast<int32_t>(c.id) : -1;
}

// Entry i of a candidate list in memory (logits / ids, id -1 past its end).
__device__ __forceinline__ Cand list_entry(const float* lv, const int32_t* lid, uint32_t i, uint32_t n) {
  if (lv == nullptr || i >= n) return kNoCand;
  const int32_t id = lid[i];
  return id < 0 ? kNoCand : Cand{order_key(lv[i]), static_cast<uint32_t>(id)};
}

// One warp merges the lanes' lists (lane's list at lv / lid, n entries in rule order; lv null: the
// lane has none) into the first n_out picks in rule order, of which only the first k can be
// candidates (the rest are none). Every lane of the warp calls it; lane 0 writes.
__device__ void merge_lane_lists(const float* lv, const int32_t* lid, uint32_t n, uint32_t k, uint32_t n_out,
                                 float* out_v, int32_t* out_id) {
  const bool writer = threadIdx.x % detail::kWarp == 0;
  uint32_t pos = 0;
  Cand head = list_entry(lv, lid, 0, n);
  for (uint32_t r = 0; r < n_out; ++r) {
    bool won = false;
    const Cand pick = r < k ? warp_pick(head, &won) : kNoCand;
    if (writer) put(out_v, out_id, r, pick);
    if (won) head = list_entry(lv, lid, ++pos, n);
  }
}

// Block-wide max (NaN ignored by fmaxf); all threads get it.
__device__ float block_max(float v, float* sv) {
  v = detail::warp_max(v);
  if (threadIdx.x % detail::kWarp == 0) sv[threadIdx.x / detail::kWarp] = v;
  __syncthreads();
  float m = sv[0];
  for (int w = 1; w < kWarps; ++w) m = fmaxf(m, sv[w]);
  __syncthreads();
  return m;
}

// Block-wide double sum in a fixed shape (same inputs -> same bits); all threads get it.
__device__ double block_sum(double v, double* sv) {
#pragma unroll
  for (int off = detail::kWarp / 2; off > 0; off /= 2) v += __shfl_xor_sync(0xFFFFFFFFu, v, off);
  if (threadIdx.x % detail::kWarp == 0) sv[threadIdx.x / detail::kWarp] = v;
  __syncthreads();
  double s = 0.0;
  for (int w = 0; w < kWarps; ++w) s += sv[w];
  __syncthreads();
  return s;
}

// Both kernels may run as dependent launches (common.cuh launch_dependent_if_enabled): each waits
// for the previous kernel before reading anything.
__global__ void __launch_bounds__(kThreads)
    digest_chunks(const float* __restrict__ logits, size_t n_vocab, uint32_t k, ChunkScratch out) {
  __shared__ float sv[kWarps + 1];
  __shared__ double sd[kWarps];
  // The warps' candidate lists (a list shorter than k ends with id -1).
  __shared__ float wv[kWarps][kDigestMaxCandidates];
  __shared__ int32_t wid[kWarps][kDigestMaxCandidates];
  detail::wait_for_previous_kernel();
  const size_t row = blockIdx.y, chunk = blockIdx.x, n_chunks = gridDim.x;
  const float* x = logits + row * n_vocab;
  const size_t base = chunk * kChunk + threadIdx.x;

  float v[kPerThread];
  int irregular = 0;
  float m = -INFINITY;
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    const size_t j = base + static_cast<size_t>(i) * kThreads;
    v[i] = j < n_vocab ? x[j] : NAN;  // past the end: never picked, never summed
    if (j < n_vocab && (isnan(v[i]) || v[i] == INFINITY)) irregular = 1;
    m = fmaxf(m, v[i]);
  }
  const float chunk_max = block_max(m, sv);
  irregular = __syncthreads_or(irregular);

  double s = 0.0;
  if (chunk_max > -INFINITY) {  // all -inf: the chunk adds nothing
    // Branch-free, so the 8 exps overlap: a NaN (past the end) adds exp(-inf) = +0, which leaves
    // the non-negative sum's bits as they are.
    double e[kPerThread];
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      const double d = static_cast<double>(v[i]) - static_cast<double>(chunk_max);
      e[i] = exp(isnan(v[i]) ? -static_cast<double>(INFINITY) : d);
    }
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) s += e[i];
  }
  const double chunk_sum = block_sum(s, sd);

  // Each warp's first k among its 256 logits: the lane's 8 sorted best first (Batcher's
  // odd-even merge network), then k rounds in which the winning lane shifts its list.
  const int lane = threadIdx.x % detail::kWarp, warp = threadIdx.x / detail::kWarp;
  Cand c[kPerThread];
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    c[i] = Cand{order_key(v[i]), static_cast<uint32_t>(base + static_cast<size_t>(i) * kThreads)};
  }
  constexpr int kNet[19][2] = {{0, 1}, {2, 3}, {4, 5}, {6, 7}, {0, 2}, {1, 3}, {4, 6}, {5, 7}, {1, 2}, {5, 6},
                               {0, 4}, {1, 5}, {2, 6}, {3, 7}, {2, 4}, {3, 5}, {1, 2}, {3, 4}, {5, 6}};
#pragma unroll
  for (int p = 0; p < 19; ++p) order_pair(c[kNet[p][0]], c[kNet[p][1]]);
  for (uint32_t r = 0; r < k; ++r) {
    bool won = false;
    const Cand pick = warp_pick(c[0], &won);
    if (lane == 0) put(wv[warp], wid[warp], r, pick);
    if (won) {
#pragma unroll
      for (int i = 0; i + 1 < kPerThread; ++i) c[i] = c[i + 1];
      c[kPerThread - 1] = kNoCand;
    }
  }
  __syncthreads();
  const size_t cell = row * n_chunks + chunk;
  if (warp == 0) {
    merge_lane_lists(lane < kWarps ? wv[lane] : nullptr, wid[lane % kWarps], k, k, k, out.cand_v + cell * k,
                     out.cand_id + cell * k);
  }
  if (threadIdx.x == 0) {
    out.sums[cell] = chunk_sum;
    out.maxes[cell] = chunk_max;
    out.irregular[cell] = irregular;
  }
}

// The merge gives each lane of its 8 warps one chunk's list: up to kMaxChunks chunks a row.
constexpr size_t kMaxChunks = size_t{kThreads};
// Dynamic shared memory: the row's candidate lists (at most 256 chunks x 64 x 8 bytes).
constexpr size_t kMergeSmemMax = kMaxChunks * kDigestMaxCandidates * (sizeof(float) + sizeof(int32_t));
size_t merge_smem(size_t n_chunks, uint32_t k) {
  return n_chunks * k * (sizeof(float) + sizeof(int32_t));
}

__global__ void __launch_bounds__(kThreads) digest_merge(uint32_t k, size_t n_chunks, ChunkScratch in, DigestRow* out) {
  extern __shared__ __align__(16) uint8_t staged[];
  __shared__ float sv[kWarps + 1];
  __shared__ double sd[kWarps];
  __shared__ float wv[kWarps][kDigestMaxCandidates];
  __shared__ int32_t wid[kWarps][kDigestMaxCandidates];
  detail::wait_for_previous_kernel();
  const size_t row = blockIdx.x;
  const size_t n_cand = n_chunks * k;
  auto* cv = reinterpret_cast<float*>(staged);
  auto* ci = reinterpret_cast<int32_t*>(cv + n_cand);
  for (size_t c = threadIdx.x; c < n_cand; c += kThreads) {
    cv[c] = in.cand_v[row * n_cand + c];
    ci[c] = in.cand_id[row * n_cand + c];
  }
  DigestRow& dst = out[row];

  const double* sums = in.sums + row * n_chunks;
  const float* maxes = in.maxes + row * n_chunks;
  float m = -INFINITY;
  int irregular = 0;
  for (size_t c = threadIdx.x; c < n_chunks; c += kThreads) {
    m = fmaxf(m, maxes[c]);
    irregular |= in.irregular[row * n_chunks + c];
  }
  const float row_max = block_max(m, sv);  // its barriers also order the staging before the merge
  irregular = __syncthreads_or(irregular);
  double s = 0.0;
  for (size_t c = threadIdx.x; c < n_chunks; c += kThreads) {
    if (maxes[c] > -INFINITY) s += sums[c] * exp(static_cast<double>(maxes[c]) - static_cast<double>(row_max));
  }
  const double total = block_sum(s, sd);
  if (threadIdx.x == 0) {
    dst.logsumexp = static_cast<double>(row_max) + log(total);
    dst.irregular = (irregular || !(row_max > -INFINITY)) ? 1 : 0;
    dst.forced_logit = 0.0f;
  }
  // Lane t of the block takes chunk t's list; each warp merges its 32, then warp 0 the 8.
  const int warp = threadIdx.x / detail::kWarp, lane = threadIdx.x % detail::kWarp;
  const size_t mine = threadIdx.x;
  merge_lane_lists(mine < n_chunks ? cv + mine * k : nullptr, ci + mine * k, k, k, k, wv[warp], wid[warp]);
  __syncthreads();
  if (warp == 0) {
    merge_lane_lists(lane < kWarps ? wv[lane] : nullptr, wid[lane % kWarps], k, k, kDigestMaxCandidates, dst.logits,
                     dst.ids);
  }
}

size_t chunks_of(size_t n_vocab) {
  return (n_vocab + kChunk - 1) / kChunk;
}
static_assert(kDigestMaxVocab <= kMaxChunks * kChunk, "the merge's lanes cover every chunk");

}  // namespace

bool digest_on_device_applies(const SamplingRule& rule) {
  if (!(rule.temperature > 0.0f)) return true;  // greedy: the first candidate
  return rule.top_k >= 1 && rule.top_k <= kDigestMaxCandidates;
}

uint32_t digest_candidates(const SamplingRule& rule) {
  if (!(rule.temperature > 0.0f)) return kDigestTopK;
  return std::max(kDigestTopK, std::min(rule.top_k, kDigestMaxCandidates));
}

size_t logit_digest_scratch_bytes(size_t n_rows, size_t n_vocab, uint32_t k) {
  const size_t cells = n_rows * chunks_of(n_vocab);
  return cells * (sizeof(double) + sizeof(float) + sizeof(int32_t)) + cells * k * (sizeof(float) + sizeof(int32_t));
}

cudaError_t logit_digest_rows(const float* logits, size_t n_rows, size_t n_vocab, uint32_t k, void* scratch,
                              DigestRow* out, cudaStream_t stream) {
  if (n_rows == 0) return cudaSuccess;
  if (n_vocab == 0 || n_vocab > kDigestMaxVocab || k == 0 || k > kDigestMaxCandidates || n_rows > 65535 ||
      scratch == nullptr || out == nullptr || logits == nullptr) {
    return cudaErrorInvalidValue;
  }
  if (!detail::f32_ok(logits) || !detail::aligned_to(scratch, alignof(double)) ||
      !detail::aligned_to(out, alignof(DigestRow))) {
    return cudaErrorMisalignedAddress;
  }
  const size_t n_chunks = chunks_of(n_vocab);
  const ChunkScratch s = carve(scratch, n_rows, n_chunks, k);
  const cudaError_t e = detail::launch_dependent_if_enabled(
      digest_chunks, dim3(static_cast<unsigned>(n_chunks), static_cast<unsigned>(n_rows)), dim3(kThreads), 0, stream,
      logits, n_vocab, k, s);
  if (e != cudaSuccess) return e;
  const size_t smem = merge_smem(n_chunks, k);
  if (const cudaError_t e2 = detail::allow_dynamic_smem<digest_merge>(kMergeSmemMax); e2 != cudaSuccess) return e2;
  return detail::launch_dependent_if_enabled(digest_merge, dim3(static_cast<unsigned>(n_rows)), dim3(kThreads), smem,
                                             stream, k, n_chunks, s, out);
}

namespace {
__global__ void edit_logits_kernel(float* logits, size_t n_rows, size_t n_vocab, const LogitEdit* edits,
                                   size_t n_edits) {
  const size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i >= n_edits) return;
  const LogitEdit e = edits[i];
  if (e.row >= n_rows || e.id < 0 || static_cast<size_t>(e.id) >= n_vocab) return;
  float* l = logits + e.row * n_vocab + static_cast<size_t>(e.id);
  // __fmul_rn / __fadd_rn: no fused multiply-add, so the bits equal the host's two operations.
  *l = __fadd_rn(*l > 0.0f ? __fmul_rn(*l, e.scale_pos) : __fmul_rn(*l, e.scale_neg), e.add);
}
}  // namespace

cudaError_t apply_logit_edits(float* logits, size_t n_rows, size_t n_vocab, const LogitEdit* edits, size_t n_edits,
                              cudaStream_t stream) {
  if (n_edits == 0) return cudaSuccess;
  if (logits == nullptr || edits == nullptr) return cudaErrorInvalidValue;
  constexpr unsigned kEditThreads = 128;
  const auto blocks = static_cast<unsigned>((n_edits + kEditThreads - 1) / kEditThreads);
  edit_logits_kernel<<<blocks, kEditThreads, 0, stream>>>(logits, n_rows, n_vocab, edits, n_edits);
  return cudaGetLastError();
}

namespace {
__global__ void token_mask_kernel(float* logits, size_t n_vocab, const uint32_t* rows, const uint32_t* mask_of_row,
                                  const uint32_t* bits, size_t n_words) {
  const size_t id = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (id >= n_vocab) return;
  const size_t w = id / 32;
  const uint32_t word = w < n_words ? bits[mask_of_row[blockIdx.y] * n_words + w] : 0u;
  if (((word >> (id % 32)) & 1u) == 0) logits[rows[blockIdx.y] * n_vocab + id] = -INFINITY;
}
}  // namespace

cudaError_t apply_token_masks(float* logits, size_t n_vocab, const uint32_t* rows, const uint32_t* mask_of_row,
                              size_t n_masked, const uint32_t* bits, size_t n_words, cudaStream_t stream) {
  if (n_masked == 0) return cudaSuccess;
  if (logits == nullptr || rows == nullptr || mask_of_row == nullptr || bits == nullptr || n_masked > 65535) {
    return cudaErrorInvalidValue;
  }
  constexpr unsigned kMaskThreads = 256;
  const dim3 grid(static_cast<unsigned>((n_vocab + kMaskThreads - 1) / kMaskThreads), static_cast<unsigned>(n_masked));
  token_mask_kernel<<<grid, kMaskThreads, 0, stream>>>(logits, n_vocab, rows, mask_of_row, bits, n_words);
  return cudaGetLastError();
}

namespace {
__global__ void forced_logits_kernel(const float* logits, size_t n_rows, size_t n_vocab, const int32_t* forced,
                                     DigestRow* rows) {
  const size_t r = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (r >= n_rows || forced[r] < 0 || static_cast<size_t>(forced[r]) >= n_vocab) return;
  rows[r].forced_logit = logits[r * n_vocab + static_cast<size_t>(forced[r])];
}
}  // namespace

cudaError_t fill_forced_logits(const float* logits, size_t n_rows, size_t n_vocab, const int32_t* forced,
                               DigestRow* rows, cudaStream_t stream) {
  if (n_rows == 0) return cudaSuccess;
  if (logits == nullptr || forced == nullptr || rows == nullptr) return cudaErrorInvalidValue;
  constexpr unsigned kThreads = 128;
  const auto blocks = static_cast<unsigned>((n_rows + kThreads - 1) / kThreads);
  forced_logits_kernel<<<blocks, kThreads, 0, stream>>>(logits, n_rows, n_vocab, forced, rows);
  return cudaGetLastError();
}

LogitDigest finish_digest(const DigestRow& row, size_t n_vocab, const SamplingRule& rule, double u) {
  LogitDigest d;
  d.logsumexp = row.logsumexp;
  const size_t top = std::min<size_t>(kDigestTopK, n_vocab);
  for (size_t i = 0; i < top; ++i) {
    d.top_ids.push_back(row.ids[i]);
    d.top_logprobs.push_back(static_cast<float>(row.logits[i] - d.logsumexp));
  }
  size_t pick = 0;  // greedy: the first candidate is the argmax (ties -> lowest id)
  if (rule.temperature > 0.0f) {
    // The rule only looks at its first top_k candidates, which are these, already in its order
    // (its tie rule, lower index first, keeps them in place): the index it picks maps back through ids.
    const size_t kept = std::min<size_t>(rule.top_k, n_vocab);
    pick = static_cast<size_t>(sample_token(row.logits, kept, rule, u));
  }
  d.token = row.ids[pick];
  d.token_logprob = static_cast<float>(static_cast<double>(row.logits[pick]) - d.logsumexp);
  return d;
}

}  // namespace ds::cuda
