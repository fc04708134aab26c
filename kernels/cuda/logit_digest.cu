// Device logit digest (see logit_digest.h). Two launches per step, whatever the row count:
//  1. digest_chunks: one block per (2048-logit chunk, row). The block's max, its sum of
//     exp(x - max) in double, and its first k candidates in rule order, found by k rounds of
//     "best element strictly after the previous pick" (a block-wide argmin per round; no
//     marking, so the candidates stay in registers).
//  2. digest_merge: one block per row. The same k rounds over the chunks' candidates, then
//     logsumexp = M + log(sum_b s_b * exp(m_b - M)) with a fixed-shape tree: deterministic.
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

// Block-wide best (rule order) of every thread's (v, id); all threads get it.
__device__ void block_best(float* v, int32_t* id, float* sv, int32_t* si) {
  const int lane = threadIdx.x % detail::kWarp, warp = threadIdx.x / detail::kWarp;
#pragma unroll
  for (int off = detail::kWarp / 2; off > 0; off /= 2) {
    const float ov = __shfl_xor_sync(0xFFFFFFFFu, *v, off);
    const int32_t oi = __shfl_xor_sync(0xFFFFFFFFu, *id, off);
    if (before(ov, oi, *v, *id)) *v = ov, *id = oi;
  }
  if (lane == 0) sv[warp] = *v, si[warp] = *id;
  __syncthreads();
  if (warp == 0) {
    *v = lane < kWarps ? sv[lane] : 0.0f;
    *id = lane < kWarps ? si[lane] : -1;
#pragma unroll
    for (int off = detail::kWarp / 2; off > 0; off /= 2) {
      const float ov = __shfl_xor_sync(0xFFFFFFFFu, *v, off);
      const int32_t oi = __shfl_xor_sync(0xFFFFFFFFu, *id, off);
      if (before(ov, oi, *v, *id)) *v = ov, *id = oi;
    }
    if (lane == 0) sv[kWarps] = *v, si[kWarps] = *id;
  }
  __syncthreads();
  *v = sv[kWarps];
  *id = si[kWarps];
  __syncthreads();  // sv/si are reused by the next round
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
  __shared__ int32_t si[kWarps + 1];
  __shared__ double sd[kWarps];
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

  const size_t cell = row * n_chunks + chunk;
  float pv = INFINITY;  // the previous pick; (+inf, -1) comes before every finite logit
  int32_t pid = -1;
  bool exhausted = false;  // block-uniform: every thread sees the same picks
  for (uint32_t r = 0; r < k; ++r) {
    float bv = 0.0f;
    int32_t bid = -1;
    if (!exhausted) {
#pragma unroll
      for (int i = 0; i < kPerThread; ++i) {
        const int32_t id = static_cast<int32_t>(base + static_cast<size_t>(i) * kThreads);
        if (after(v[i], id, pv, pid) && before(v[i], id, bv, bid)) bv = v[i], bid = id;
      }
      block_best(&bv, &bid, sv, si);
    }
    if (threadIdx.x == 0) {
      out.cand_v[cell * k + r] = bv;
      out.cand_id[cell * k + r] = bid;
    }
    exhausted = bid < 0;
    pv = bv;
    pid = bid;
  }
  if (threadIdx.x == 0) {
    out.sums[cell] = chunk_sum;
    out.maxes[cell] = chunk_max;
    out.irregular[cell] = irregular;
  }
}

__global__ void __launch_bounds__(kThreads) digest_merge(uint32_t k, size_t n_chunks, ChunkScratch in,
                                                           DigestRow* out) {
  __shared__ float sv[kWarps + 1];
  __shared__ int32_t si[kWarps + 1];
  __shared__ double sd[kWarps];
  detail::wait_for_previous_kernel();
  const size_t row = blockIdx.x;
  const size_t n_cand = n_chunks * k;
  const float* cv = in.cand_v + row * n_cand;
  const int32_t* ci = in.cand_id + row * n_cand;
  DigestRow& dst = out[row];

  float pv = INFINITY;
  int32_t pid = -1;
  bool exhausted = false;
  for (uint32_t r = 0; r < kDigestMaxCandidates; ++r) {
    float bv = 0.0f;
    int32_t bid = -1;
    if (r < k && !exhausted) {
      for (size_t c = threadIdx.x; c < n_cand; c += kThreads) {
        const int32_t id = ci[c];
        if (id >= 0 && after(cv[c], id, pv, pid) && before(cv[c], id, bv, bid)) bv = cv[c], bid = id;
      }
      block_best(&bv, &bid, sv, si);
    }
    if (threadIdx.x == 0) {
      dst.ids[r] = bid;
      dst.logits[r] = bv;
    }
    exhausted = bid < 0;
    pv = bv;
    pid = bid;
  }

  const double* sums = in.sums + row * n_chunks;
  const float* maxes = in.maxes + row * n_chunks;
  float m = -INFINITY;
  int irregular = 0;
  for (size_t c = threadIdx.x; c < n_chunks; c += kThreads) {
    m = fmaxf(m, maxes[c]);
    irregular |= in.irregular[row * n_chunks + c];
  }
  const float row_max = block_max(m, sv);
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
  return detail::launch_dependent_if_enabled(digest_merge, dim3(static_cast<unsigned>(n_rows)), dim3(kThreads), 0,
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
