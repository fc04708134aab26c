// Device logit digest (see logit_digest.h). Two launches per step, whatever the row count:
//  1. digest_chunks: one block per (2048-logit chunk, row). The block's max and its sum of
//     exp(x - max) in double; each warp finds its first k candidates in rule order among its
//     256 logits (k rounds of "best element strictly after the previous pick", a shuffle tree per
//     round, the candidates in registers), then warp 0 merges the warps' sorted lists.
//  2. digest_merge: one block per row. logsumexp = M + log(sum_b s_b * exp(m_b - M)) with a
//     fixed-shape tree (deterministic); warp 0 merges the chunks' sorted lists (staged in shared
//     memory when they fit) into the row's first k.
// A merge round is a shuffle tree over each list's first candidate after the previous pick: no
// block barrier per round (the first version's k rounds of block-wide argmins, each re-reading the
// candidates from global memory, measured 35 + 48 us a row on the H200; ncu, session 10).
// Order is total except for NaN, which is never selected; rows with NaN or +inf are flagged
// (the CPU's own order is ill-defined there) and digested on the host from the full row.
#include "kernels/cuda/logit_digest.h"

#include <algorithm>
#include <cmath>

#include "kernels/cuda/common.cuh"

namespace ds::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kPerThread = 8;
constexpr size_t kChunk = size_t{kThreads} * kPerThread;
constexpr int kWarps = kThreads / detail::kWarp;

// Where the chunk results live in the scratch buffer (doubles first for alignment).
struct ChunkScratch {
  double* sums;    // [rows][chunks]  sum of exp(x - chunk max)
  float* maxes;    // [rows][chunks]
  int32_t* irregular;  // [rows][chunks]
  float* cand_v;   // [rows][chunks][k]
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

// a comes before b in rule order (logit descending, ties -> lower id); id < 0 = no candidate.
__device__ __forceinline__ bool before(float av, int32_t ai, float bv, int32_t bi) {
  if (ai < 0) return false;
  if (bi < 0) return true;
  return av > bv || (av == bv && ai < bi);
}

// (v, id) comes strictly after the previous pick. NaN never does, so it is never picked.
__device__ __forceinline__ bool after(float v, int32_t id, float pv, int32_t pid) {
  return v < pv || (v == pv && id > pid);
}

// Warp-wide best (rule order) of every lane's (v, id); all lanes get it.
__device__ __forceinline__ void warp_best(float& v, int32_t& id) {
#pragma unroll
  for (int off = detail::kWarp / 2; off > 0; off /= 2) {
    const float ov = __shfl_xor_sync(0xFFFFFFFFu, v, off);
    const int32_t oi = __shfl_xor_sync(0xFFFFFFFFu, id, off);
    if (before(ov, oi, v, id)) v = ov, id = oi;
  }
}

// The first candidate of a list in rule order (ids < 0 end it) strictly after (pv, pid): the
// list's first one not yet picked. None: id -1.
__device__ __forceinline__ void list_head(const float* lv, const int32_t* lid, uint32_t n, float pv, int32_t pid,
                                          float& v, int32_t& id) {
  for (uint32_t i = 0; i < n; ++i) {
    const int32_t ci = lid[i];
    if (ci < 0) break;
    if (after(lv[i], ci, pv, pid)) {
      v = lv[i];
      id = ci;
      return;
    }
  }
  v = 0.0f;
  id = -1;
}

// One warp merges n_lists candidate lists in rule order (list j at lv / lid + j * stride, up to k
// each) into the first n_out in rule order (out_v / out_id; none: id -1, logit 0); only the
// first k can be candidates. Every lane of the warp calls it.
__device__ void warp_merge(const float* lv, const int32_t* lid, size_t n_lists, size_t stride, uint32_t k,
                           uint32_t n_out, float* out_v, int32_t* out_id) {
  const int lane = static_cast<int>(threadIdx.x % detail::kWarp);
  float pv = INFINITY;  // the previous pick; (+inf, -1) comes before every finite logit
  int32_t pid = -1;
  bool exhausted = false;  // warp-uniform: every lane sees the same picks
  for (uint32_t r = 0; r < n_out; ++r) {
    float bv = 0.0f;
    int32_t bid = -1;
    if (r < k && !exhausted) {
      for (size_t j = lane; j < n_lists; j += detail::kWarp) {
        float v;
        int32_t id;
        list_head(lv + j * stride, lid + j * stride, k, pv, pid, v, id);
        if (before(v, id, bv, bid)) bv = v, bid = id;
      }
      warp_best(bv, bid);
    }
    if (lane == 0) {
      out_v[r] = bv;
      out_id[r] = bid;
    }
    exhausted = bid < 0;
    pv = bv;
    pid = bid;
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
__global__ void __launch_bounds__(kThreads) digest_chunks(const float* __restrict__ logits, size_t n_vocab,
                                                            uint32_t k, ChunkScratch out) {
  __shared__ float sv[kWarps + 1];
  __shared__ double sd[kWarps];
  // The warps' candidate lists; a list shorter than k ends with id -1 (wid starts all -1).
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
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      if (!isnan(v[i])) s += exp(static_cast<double>(v[i]) - static_cast<double>(chunk_max));
    }
  }
  const double chunk_sum = block_sum(s, sd);

  // Each warp's first k among its 256 logits, then warp 0 merges the 8 lists.
  const int lane = threadIdx.x % detail::kWarp, warp = threadIdx.x / detail::kWarp;
  for (uint32_t r = lane; r < kDigestMaxCandidates; r += detail::kWarp) wid[warp][r] = -1;
  __syncwarp();
  float pv = INFINITY;
  int32_t pid = -1;
  bool exhausted = false;  // warp-uniform
  for (uint32_t r = 0; r < k && !exhausted; ++r) {
    float bv = 0.0f;
    int32_t bid = -1;
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      const int32_t id = static_cast<int32_t>(base + static_cast<size_t>(i) * kThreads);
      if (after(v[i], id, pv, pid) && before(v[i], id, bv, bid)) bv = v[i], bid = id;
    }
    warp_best(bv, bid);
    if (lane == 0) wv[warp][r] = bv, wid[warp][r] = bid;
    exhausted = bid < 0;
    pv = bv;
    pid = bid;
  }
  __syncthreads();
  const size_t cell = row * n_chunks + chunk;
  if (warp == 0) warp_merge(&wv[0][0], &wid[0][0], kWarps, kDigestMaxCandidates, k, k, out.cand_v + cell * k,
                            out.cand_id + cell * k);
  if (threadIdx.x == 0) {
    out.sums[cell] = chunk_sum;
    out.maxes[cell] = chunk_max;
    out.irregular[cell] = irregular;
  }
}

// Dynamic shared memory: the row's candidate lists when they fit in kMergeSmem bytes (k = 64 up
// to 192 chunks, k = 16 up to 768: vocabularies of 393K / 1.5M logits); else warp 0 reads them
// from global memory, with the same result.
constexpr size_t kMergeSmem = 96 * 1024;
__host__ __device__ size_t merge_smem(size_t n_chunks, uint32_t k) {
  const size_t bytes = n_chunks * k * (sizeof(float) + sizeof(int32_t));
  return bytes <= kMergeSmem ? bytes : 0;
}

__global__ void __launch_bounds__(kThreads) digest_merge(uint32_t k, size_t n_chunks, ChunkScratch in,
                                                           DigestRow* out) {
  extern __shared__ __align__(16) uint8_t staged[];
  __shared__ float sv[kWarps + 1];
  __shared__ double sd[kWarps];
  detail::wait_for_previous_kernel();
  const size_t row = blockIdx.x;
  const size_t n_cand = n_chunks * k;
  const float* cv = in.cand_v + row * n_cand;
  const int32_t* ci = in.cand_id + row * n_cand;
  DigestRow& dst = out[row];
  if (merge_smem(n_chunks, k) > 0) {
    auto* sv_cand = reinterpret_cast<float*>(staged);
    auto* si_cand = reinterpret_cast<int32_t*>(sv_cand + n_cand);
    for (size_t c = threadIdx.x; c < n_cand; c += kThreads) sv_cand[c] = cv[c], si_cand[c] = ci[c];
    cv = sv_cand;
    ci = si_cand;
  }

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
    dst.pad = 0;
  }
  if (threadIdx.x < detail::kWarp) warp_merge(cv, ci, n_chunks, k, k, kDigestMaxCandidates, dst.logits, dst.ids);
}

size_t chunks_of(size_t n_vocab) { return (n_vocab + kChunk - 1) / kChunk; }

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
  if (n_vocab == 0 || n_vocab > size_t{INT32_MAX} || k == 0 || k > kDigestMaxCandidates || n_rows > 65535 ||
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
  if (const cudaError_t e2 = detail::allow_dynamic_smem<digest_merge>(kMergeSmem); e2 != cudaSuccess) return e2;
  return detail::launch_dependent_if_enabled(digest_merge, dim3(static_cast<unsigned>(n_rows)), dim3(kThreads), smem,
                                             stream, k, n_chunks, s, out);
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
