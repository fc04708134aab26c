#include <cmath>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/gdn.h"

namespace ds::cuda {
namespace {

using detail::kWarp;

// Work split: value head n and a group of kCols value columns j per block (one warp, one column per
// lane). Column j of S only ever depends on column j (m_j, delta_j, o_j), so columns are fully
// independent and no cross-lane reduction is needed; lanes share only the token's q and k, staged
// in shared memory.
constexpr int kCols = kWarp;
// Shared-memory budget of the prefill form ([dk] q, [dk] k, [dk][kCols] state) without opting in
// to more than the default 48 KB.
constexpr size_t kSmemBudget = 48 * 1024;

// The gate math of spec §5.1, the one definition gates_kernel and the decode recurrence share so
// that computing the gates inside the recurrence gives the bits of the two-launch form.
__device__ __forceinline__ float gate_g(float alpha, float a, float dt_bias) {
  return a * detail::softplus(alpha + dt_bias);
}
__device__ __forceinline__ float gate_beta(float beta_raw) {
  return detail::sigmoid(beta_raw);
}

struct GdnArgs {
  GdnShape s;
  const float *q, *k, *v, *g, *beta;
  float* state;
  float* out;
  float q_scale;
  // Decode of several sequences in one launch (blockIdx.z = sequence, one token each): sequence
  // z's inputs and output are "token" z of the arrays and its state is state + slots[z] *
  // slot_stride. nullptr: one sequence, state as given.
  const uint32_t* slots = nullptr;
  size_t slot_stride = 0;
  // Decode with the gates computed in the launch: when raw.alpha is set, g and beta are unused
  // and token t's gates come from row t of raw (gdn_decode_slots' raw-gate form).
  GdnRawGates raw{};
  // A verify row: the state after token t < n_captures also goes to captures + t * capture_stride
  // (same layout as state). nullptr: none.
  float* captures = nullptr;
  size_t capture_stride = 0, n_captures = 0;
};

// Token t's log-decay g and write strength beta of value head n: from the g / beta arrays, or
// computed from the raw gate inputs.
struct TokenGates {
  float g, beta;
};
__device__ __forceinline__ TokenGates token_gates(const GdnArgs& a, size_t t, size_t n) {
  if (a.raw.alpha == nullptr) return {a.g[t * a.s.n_v_heads + n], a.beta[t * a.s.n_v_heads + n]};
  const GdnRawGates& r = a.raw;
  return {gate_g(r.alpha[t * r.alpha_stride + n], r.a[n], r.dt_bias[n]), gate_beta(r.beta_raw[t * r.beta_stride + n])};
}

// The arguments of sequence `seq` of a batched decode launch (unchanged for a single sequence).
__device__ __forceinline__ GdnArgs for_sequence(GdnArgs a, unsigned seq) {
  if (a.slots == nullptr) return a;
  a.q += seq * a.s.qk_token_stride;
  a.k += seq * a.s.qk_token_stride;
  a.v += seq * a.s.v_token_stride;
  if (a.raw.alpha != nullptr) {
    a.raw.alpha += seq * a.raw.alpha_stride;
    a.raw.beta_raw += seq * a.raw.beta_stride;
  } else {
    a.g += size_t{seq} * a.s.n_v_heads;
    a.beta += size_t{seq} * a.s.n_v_heads;
  }
  a.out += size_t{seq} * a.s.n_v_heads * a.s.dv;
  a.state += a.slots[seq] * a.slot_stride;
  return a;
}

// 1/sqrt(dk) rounded once from double, as kernels/cpu/gdn.cpp does.
float q_scale(size_t dk) {
  return static_cast<float>(1.0 / std::sqrt(static_cast<double>(dk)));
}

// Spec §5.4 per token: decay, read m = S^T k, delta = beta (v - m), write S += k delta^T, then
// o = S^T (q / sqrt(dk)) with the updated state. kShared: S lives in shared memory for the whole
// call (prefill); otherwise every access goes to the global state (decode touches it once anyway).
template <bool kShared>
__global__ void gdn_kernel(GdnArgs a) {
  detail::wait_for_previous_kernel();  // q, k, v, g, beta and the state may be the previous kernel's
  extern __shared__ float smem[];
  const GdnShape& s = a.s;
  const size_t n = blockIdx.x, kh = n % s.n_k_heads;  // tiled V -> K head mapping
  const unsigned lane = threadIdx.x;
  const size_t j = size_t{blockIdx.y} * kCols + lane;
  const bool active = j < s.dv;
  float* qs = smem;                           // [dk] scaled q of the current token
  float* ks = smem + s.dk;                    // [dk] k of the current token
  float* Sg = a.state + n * s.dk * s.dv + j;  // S[i][j] at Sg[i * dv]
  float* Ss = smem + 2 * s.dk + lane;         // S[i][j] at Ss[i * kCols]
  float* S = kShared ? Ss : Sg;
  const size_t S_stride = kShared ? kCols : s.dv;

  if (kShared && active) {
    for (size_t i = 0; i < s.dk; ++i) Ss[i * kCols] = Sg[i * s.dv];
  }
  for (size_t t = 0; t < s.n_tokens; ++t) {
    __syncwarp();  // everyone is done with the previous token's q and k
    const float* qt = a.q + t * s.qk_token_stride + kh * s.dk;
    const float* kt = a.k + t * s.qk_token_stride + kh * s.dk;
    for (size_t i = lane; i < s.dk; i += kWarp) {
      qs[i] = qt[i] * a.q_scale;
      ks[i] = kt[i];
    }
    __syncwarp();
    if (!active) continue;
    const float alpha = expf(a.g[t * s.n_v_heads + n]);
    const float beta = a.beta[t * s.n_v_heads + n];
    float m = 0.0f;
    for (size_t i = 0; i < s.dk; ++i) {
      const float decayed = S[i * S_stride] * alpha;
      S[i * S_stride] = decayed;
      m += decayed * ks[i];
    }
    const float delta = (a.v[t * s.v_token_stride + n * s.dv + j] - m) * beta;
    float o = 0.0f;
    for (size_t i = 0; i < s.dk; ++i) {
      const float updated = S[i * S_stride] + ks[i] * delta;
      S[i * S_stride] = updated;
      o += updated * qs[i];
    }
    a.out[(t * s.n_v_heads + n) * s.dv + j] = o;
  }
  if (kShared && active) {
    for (size_t i = 0; i < s.dk; ++i) Sg[i * s.dv] = Ss[i * kCols];
  }
}

// ---- parallel recurrence (dk <= 128): the state lives in registers across a 128-thread block ---
// Block = (value head n, 16 value columns j). Thread (ig, jj): column j0 + jj, key rows
// i = ig*16 .. ig*16+15 (8 row groups), so S[i][j] stays in 16 registers for the whole call and is
// read and written back once. Per token: m_j = sum_i S[i][j] k_i and o_j = sum_i S[i][j] q_i are
// reduced over the 8 row groups through shared memory (3 barriers per token). q/k are staged in
// shared memory (zero-padded to 128, so padded rows contribute nothing), double-buffered by token.
constexpr int kPJ = 16, kPGroups = 8, kPI = 16, kPThreads = kPJ * kPGroups, kPMaxDk = kPGroups * kPI;

__global__ void __launch_bounds__(kPThreads) gdn_block_kernel(GdnArgs args) {
  detail::wait_for_previous_kernel();  // every input and the state may be the previous kernel's
  const GdnArgs a = for_sequence(args, blockIdx.z);
  __shared__ float qs[2][kPMaxDk], ks[2][kPMaxDk];
  __shared__ float red_m[kPGroups][kPJ], red_o[kPGroups][kPJ];
  const GdnShape& s = a.s;
  const size_t n = blockIdx.x, kh = n % s.n_k_heads;
  const int tid = static_cast<int>(threadIdx.x), jj = tid % kPJ, ig = tid / kPJ;
  const size_t j = size_t{blockIdx.y} * kPJ + jj;
  const bool active = j < s.dv;
  float* Sg = a.state + n * s.dk * s.dv + j;
  float S[kPI];
#pragma unroll
  for (int ii = 0; ii < kPI; ++ii) {
    const size_t i = size_t(ig) * kPI + ii;
    S[ii] = (active && i < s.dk) ? Sg[i * s.dv] : 0.0f;
  }
  for (size_t t = 0; t < s.n_tokens; ++t) {
    const int buf = static_cast<int>(t % 2);
    if (tid < kPMaxDk) {
      const bool in = static_cast<size_t>(tid) < s.dk;
      qs[buf][tid] = in ? a.q[t * s.qk_token_stride + kh * s.dk + tid] * a.q_scale : 0.0f;
      ks[buf][tid] = in ? a.k[t * s.qk_token_stride + kh * s.dk + tid] : 0.0f;
    }
    const TokenGates gates = token_gates(a, t, n);
    const float alpha = expf(gates.g);
    const float beta = gates.beta;
    const float vj = active ? a.v[t * s.v_token_stride + n * s.dv + j] : 0.0f;
    __syncthreads();
    const float* kr = ks[buf] + ig * kPI;
    const float* qr = qs[buf] + ig * kPI;
    float m = 0.0f;
#pragma unroll
    for (int ii = 0; ii < kPI; ++ii) {
      S[ii] *= alpha;
      m += S[ii] * kr[ii];
    }
    red_m[ig][jj] = m;
    __syncthreads();
    float mj = 0.0f;
#pragma unroll
    for (int gi = 0; gi < kPGroups; ++gi) mj += red_m[gi][jj];
    const float delta = (vj - mj) * beta;
    float o = 0.0f;
#pragma unroll
    for (int ii = 0; ii < kPI; ++ii) {
      S[ii] += kr[ii] * delta;
      o += S[ii] * qr[ii];
    }
    red_o[ig][jj] = o;
    if (t < a.n_captures && active) {
      float* Cg = a.captures + t * a.capture_stride + n * s.dk * s.dv + j;
#pragma unroll
      for (int ii = 0; ii < kPI; ++ii) {
        const size_t i = size_t(ig) * kPI + ii;
        if (i < s.dk) Cg[i * s.dv] = S[ii];
      }
    }
    __syncthreads();
    if (ig == 0 && active) {
      float oj = 0.0f;
#pragma unroll
      for (int gi = 0; gi < kPGroups; ++gi) oj += red_o[gi][jj];
      a.out[(t * s.n_v_heads + n) * s.dv + j] = oj;
    }
  }
#pragma unroll
  for (int ii = 0; ii < kPI; ++ii) {
    const size_t i = size_t(ig) * kPI + ii;
    if (active && i < s.dk) Sg[i * s.dv] = S[ii];
  }
}

cudaError_t check_gdn(const GdnShape& s, const float* q, const float* k, const float* v, const float* g,
                      const float* beta, const float* state, const float* out) {
  for (const float* p : {q, k, v, g, beta, state, out}) {
    if (p == nullptr) return cudaErrorInvalidValue;
    if (!detail::aligned_to(p, 4)) return cudaErrorMisalignedAddress;
  }
  if (s.n_k_heads == 0 || s.n_v_heads == 0 || s.dk == 0 || s.dv == 0) return cudaErrorInvalidValue;
  if (s.n_tokens > 1 && (s.qk_token_stride < s.n_k_heads * s.dk || s.v_token_stride < s.n_v_heads * s.dv)) {
    return cudaErrorInvalidValue;
  }
  if (s.n_v_heads > detail::kMaxGridX || (s.dv + kCols - 1) / kCols > 65535) return cudaErrorInvalidValue;
  return cudaSuccess;
}

template <bool kShared>
cudaError_t launch_gdn(const GdnShape& s, const float* q, const float* k, const float* v, const float* g,
                       const float* beta, float* state, float* out, cudaStream_t stream) {
  if (s.n_tokens == 0) return cudaSuccess;
  if (const cudaError_t e = check_gdn(s, q, k, v, g, beta, state, out); e != cudaSuccess) return e;
  const size_t smem = (2 * s.dk + (kShared ? s.dk * kCols : 0)) * sizeof(float);
  if (smem > kSmemBudget) {
    if (kShared) return launch_gdn<false>(s, q, k, v, g, beta, state, out, stream);
    return cudaErrorInvalidValue;  // dk beyond any real model (> 6000)
  }
  const GdnArgs args{s, q, k, v, g, beta, state, out, q_scale(s.dk)};
  if (s.dk <= static_cast<size_t>(kPMaxDk) && (s.dv + kPJ - 1) / kPJ <= 65535) {
    const dim3 grid(static_cast<unsigned>(s.n_v_heads), static_cast<unsigned>((s.dv + kPJ - 1) / kPJ));
    return detail::launch_dependent_if_enabled(gdn_block_kernel, grid, dim3(kPThreads), 0, stream, args);
  }
  const dim3 grid(static_cast<unsigned>(s.n_v_heads), static_cast<unsigned>((s.dv + kCols - 1) / kCols));
  return detail::launch_dependent_if_enabled(gdn_kernel<kShared>, grid, dim3(kCols), smem, stream, args);
}

// Raw gate rows of n_rows rows (> 1 rows must not overlap, as in gdn_gates).
cudaError_t check_raw_gates(const GdnRawGates& r, size_t nv, size_t n_rows) {
  for (const float* p : {r.alpha, r.beta_raw, r.a, r.dt_bias}) {
    if (p == nullptr) return cudaErrorInvalidValue;
    if (!detail::aligned_to(p, 4)) return cudaErrorMisalignedAddress;
  }
  if (n_rows > 1 && (r.alpha_stride < nv || r.beta_stride < nv)) return cudaErrorInvalidValue;
  return cudaSuccess;
}

// One block kernel launch over (value head, value-column group, sequence); arguments checked.
cudaError_t launch_decode_slots(GdnArgs args, size_t slot_stride, const uint32_t* slots, size_t n_seqs,
                                cudaStream_t stream) {
  args.slots = slots;
  args.slot_stride = slot_stride;
  const dim3 grid(static_cast<unsigned>(args.s.n_v_heads), static_cast<unsigned>((args.s.dv + kPJ - 1) / kPJ),
                  static_cast<unsigned>(n_seqs));
  return detail::launch_dependent_if_enabled(gdn_block_kernel, grid, dim3(kPThreads), 0, stream, args);
}

constexpr int kGateThreads = 256;

__global__ void gates_kernel(const float* alpha, size_t as, const float* beta_raw, size_t bs, const float* a,
                             const float* dt_bias, size_t n_tokens, size_t nv, float* g, float* beta) {
  detail::wait_for_previous_kernel();
  for (size_t e = detail::global_thread(); e < n_tokens * nv; e += detail::global_threads()) {
    const size_t t = e / nv, n = e % nv;
    g[e] = gate_g(alpha[t * as + n], a[n], dt_bias[n]);
    beta[e] = gate_beta(beta_raw[t * bs + n]);
  }
}

}  // namespace

cudaError_t gdn_recurrent(const GdnShape& s, const float* q, const float* k, const float* v, const float* g,
                          const float* beta, float* state, float* out, cudaStream_t stream) {
  return launch_gdn<false>(s, q, k, v, g, beta, state, out, stream);
}

cudaError_t gdn_prefill(const GdnShape& s, const float* q, const float* k, const float* v, const float* g,
                        const float* beta, float* state, float* out, cudaStream_t stream) {
  return launch_gdn<true>(s, q, k, v, g, beta, state, out, stream);
}

namespace {

// gdn_recurrent_captured's launch, its g / beta or raw gates already in args (checked by check_gdn).
cudaError_t launch_captured(GdnArgs args, size_t n_captures, float* captures, size_t capture_stride,
                            cudaStream_t stream) {
  const GdnShape& s = args.s;
  if (n_captures > s.n_tokens || (n_captures > 0 && (captures == nullptr || !detail::aligned_to(captures, 4)))) {
    return cudaErrorInvalidValue;
  }
  if (n_captures > 1 && capture_stride < s.n_v_heads * s.dk * s.dv) return cudaErrorInvalidValue;
  if (s.dk > static_cast<size_t>(kPMaxDk) || (s.dv + kPJ - 1) / kPJ > 65535) return cudaErrorNotSupported;
  args.captures = captures;
  args.capture_stride = capture_stride;
  args.n_captures = n_captures;
  const dim3 grid(static_cast<unsigned>(s.n_v_heads), static_cast<unsigned>((s.dv + kPJ - 1) / kPJ));
  return detail::launch_dependent_if_enabled(gdn_block_kernel, grid, dim3(kPThreads), 0, stream, args);
}

}  // namespace

cudaError_t gdn_recurrent_captured(const GdnShape& s, const float* q, const float* k, const float* v, const float* g,
                                   const float* beta, float* state, float* out, size_t n_captures, float* captures,
                                   size_t capture_stride, cudaStream_t stream) {
  if (s.n_tokens == 0) return cudaSuccess;
  if (const cudaError_t e = check_gdn(s, q, k, v, g, beta, state, out); e != cudaSuccess) return e;
  return launch_captured(GdnArgs{s, q, k, v, g, beta, state, out, q_scale(s.dk)}, n_captures, captures, capture_stride,
                         stream);
}

cudaError_t gdn_recurrent_captured(const GdnShape& s, const float* q, const float* k, const float* v,
                                   const GdnRawGates& gates, float* state, float* out, size_t n_captures,
                                   float* captures, size_t capture_stride, cudaStream_t stream) {
  if (s.n_tokens == 0) return cudaSuccess;
  if (const cudaError_t e = check_raw_gates(gates, s.n_v_heads, s.n_tokens); e != cudaSuccess) return e;
  // check_gdn's g / beta: the raw rows stand in (the kernel reads no g / beta array).
  if (const cudaError_t e = check_gdn(s, q, k, v, gates.alpha, gates.beta_raw, state, out); e != cudaSuccess) return e;
  GdnArgs args{s, q, k, v, nullptr, nullptr, state, out, q_scale(s.dk)};
  args.raw = gates;
  return launch_captured(args, n_captures, captures, capture_stride, stream);
}

bool gdn_decode_slots_applies(const GdnShape& s, size_t n_seqs) {
  return s.n_tokens == 1 && s.dk > 0 && s.dk <= static_cast<size_t>(kPMaxDk) && s.dv > 0 && s.n_k_heads > 0 &&
         s.n_v_heads > 0 && s.n_v_heads <= detail::kMaxGridX && (s.dv + kPJ - 1) / kPJ <= 65535 && n_seqs >= 1 &&
         n_seqs <= 65535 && s.qk_token_stride >= s.n_k_heads * s.dk && s.v_token_stride >= s.n_v_heads * s.dv;
}

cudaError_t gdn_decode_slots(const GdnShape& s, const float* q, const float* k, const float* v, const float* g,
                             const float* beta, float* state0, size_t slot_stride, const uint32_t* slots, size_t n_seqs,
                             float* out, cudaStream_t stream) {
  if (!gdn_decode_slots_applies(s, n_seqs) || slots == nullptr) return cudaErrorInvalidValue;
  if (const cudaError_t e = check_gdn(s, q, k, v, g, beta, state0, out); e != cudaSuccess) return e;
  return launch_decode_slots(GdnArgs{s, q, k, v, g, beta, state0, out, q_scale(s.dk)}, slot_stride, slots, n_seqs,
                             stream);
}

cudaError_t gdn_decode_slots(const GdnShape& s, const float* q, const float* k, const float* v,
                             const GdnRawGates& gates, float* state0, size_t slot_stride, const uint32_t* slots,
                             size_t n_seqs, float* out, cudaStream_t stream) {
  if (!gdn_decode_slots_applies(s, n_seqs) || slots == nullptr) return cudaErrorInvalidValue;
  if (const cudaError_t e = check_raw_gates(gates, s.n_v_heads, n_seqs); e != cudaSuccess) return e;
  // check_gdn's g / beta: the raw rows stand in (the kernel reads no g / beta array).
  if (const cudaError_t e = check_gdn(s, q, k, v, gates.alpha, gates.beta_raw, state0, out); e != cudaSuccess) {
    return e;
  }
  GdnArgs args{s, q, k, v, nullptr, nullptr, state0, out, q_scale(s.dk)};
  args.raw = gates;
  return launch_decode_slots(args, slot_stride, slots, n_seqs, stream);
}

cudaError_t gdn_gates(const float* alpha, size_t alpha_stride, const float* beta_raw, size_t beta_stride,
                      const float* a, const float* dt_bias, size_t n_tokens, size_t nv, float* g, float* beta,
                      cudaStream_t stream) {
  if (n_tokens == 0 || nv == 0) return cudaSuccess;
  for (const float* p : {alpha, beta_raw, a, dt_bias, static_cast<const float*>(g), static_cast<const float*>(beta)}) {
    if (p == nullptr) return cudaErrorInvalidValue;
    if (!detail::aligned_to(p, 4)) return cudaErrorMisalignedAddress;
  }
  if (n_tokens > 1 && (alpha_stride < nv || beta_stride < nv)) return cudaErrorInvalidValue;
  return detail::launch_dependent_if_enabled(gates_kernel, dim3(detail::grid_for(n_tokens * nv, kGateThreads)),
                                             dim3(kGateThreads), 0, stream, alpha, alpha_stride, beta_raw, beta_stride,
                                             a, dt_bias, n_tokens, nv, g, beta);
}

}  // namespace ds::cuda
