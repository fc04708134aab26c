// Tensor-core prefill GEMM for Q8_0 weights (see matmul_fast.h for the numerics).
//
// y[t][r] = sum_k W[r][k] x[t][k]: A = W (M = rows, row-major, K contiguous), B = x (N = tokens,
// K contiguous, i.e. the "col" operand of mma.row.col). Both are staged as bf16 in global scratch:
// W in chunks of rows (<= kChunkBytes of bf16), x once per call.
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <utility>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/dequant_q8.h"
#include "kernels/cuda/device_info.h"
#include "kernels/cuda/gemm_cublas.h"
#include "kernels/cuda/matmul_fast.h"
#include "kernels/cuda/ptx_mma.cuh"
#include "kernels/cuda/weights.cuh"

namespace ds::cuda::detail {
namespace {

constexpr int kBM = 128, kBN = 128, kBK = 32, kStages = 4, kThreads = 256;
constexpr int kLd = kBK + 8;  // padded smem row (80 bytes): ldmatrix rows hit distinct banks
constexpr int kStageElems = (kBM + kBN) * kLd;
constexpr size_t kSmemBytes = size_t{kStages} * kStageElems * sizeof(__nv_bfloat16);
constexpr size_t kChunkBytes = size_t{96} << 20;  // bf16 weight chunk

using namespace ptx;

// A: [M][K] bf16, B: [N][K] bf16 (K % 32 == 0, 16-byte aligned rows), y[n * ys + m] f32.
// 8 warps as 2 (M) x 4 (N), warp tile 64 x 32.
__global__ void __launch_bounds__(kThreads)
    gemm_bf16_kernel(const __nv_bfloat16* __restrict__ A, const __nv_bfloat16* __restrict__ B, int M, int N, int K,
                     float* __restrict__ y, size_t ys) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  auto* smem = reinterpret_cast<__nv_bfloat16*>(smem_raw);
  const int tid = static_cast<int>(threadIdx.x), lane = tid % 32, warp = tid / 32;
  const int n0 = static_cast<int>(blockIdx.x) * kBN, m0 = static_cast<int>(blockIdx.y) * kBM;
  const int wm = (warp / 4) * 64, wn = (warp % 4) * 32;
  const int k_tiles = K / kBK;

  auto load_stage = [&](int stage, int kt) {
    __nv_bfloat16* sa = smem + stage * kStageElems;
    __nv_bfloat16* sb = sa + kBM * kLd;
    const int k0 = kt * kBK;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int c = tid + i * kThreads, row = c / 4, col = (c % 4) * 8;
      const int gm = m0 + row, gn = n0 + row;
      const bool va = gm < M, vb = gn < N;
      cp_async16(smem_u32(sa + row * kLd + col), A + static_cast<size_t>(va ? gm : 0) * K + k0 + col, va);
      cp_async16(smem_u32(sb + row * kLd + col), B + static_cast<size_t>(vb ? gn : 0) * K + k0 + col, vb);
    }
  };

  float acc[4][4][4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < k_tiles) load_stage(s, s);
    cp_async_commit();
  }

  // ldmatrix lane addressing: A x4 -> rows lane%16, k half lane/16; B x4 -> two n8 tiles x two k halves.
  const int a_row = lane % 16, a_col = (lane / 16) * 8;
  const int b_row = (lane % 8) + 8 * (lane / 16), b_col = ((lane / 8) % 2) * 8;

  for (int kt = 0; kt < k_tiles; ++kt) {
    cp_async_wait<kStages - 2>();
    __syncthreads();
    const int next = kt + kStages - 1;
    if (next < k_tiles) load_stage(next % kStages, next);
    cp_async_commit();

    const __nv_bfloat16* sa = smem + (kt % kStages) * kStageElems;
    const __nv_bfloat16* sb = sa + kBM * kLd;
#pragma unroll
    for (int kk = 0; kk < kBK; kk += 16) {
      uint32_t af[4][4], bf[4][2];
#pragma unroll
      for (int mi = 0; mi < 4; ++mi) {
        ldmatrix_x4(smem_u32(sa + (wm + mi * 16 + a_row) * kLd + kk + a_col), af[mi][0], af[mi][1], af[mi][2],
                    af[mi][3]);
      }
#pragma unroll
      for (int nj = 0; nj < 2; ++nj) {
        ldmatrix_x4(smem_u32(sb + (wn + nj * 16 + b_row) * kLd + kk + b_col), bf[2 * nj][0], bf[2 * nj][1],
                    bf[2 * nj + 1][0], bf[2 * nj + 1][1]);
      }
#pragma unroll
      for (int mi = 0; mi < 4; ++mi)
#pragma unroll
        for (int ni = 0; ni < 4; ++ni) mma_bf16(acc[mi][ni], af[mi], bf[ni][0], bf[ni][1]);
    }
  }
  cp_async_wait<0>();

  // Fragment: c0,c1 at (row g, cols 2q, 2q+1), c2,c3 at row g+8; row = weight row, col = token.
  const int g = lane / 4, q = lane % 4;
#pragma unroll
  for (int mi = 0; mi < 4; ++mi) {
#pragma unroll
    for (int ni = 0; ni < 4; ++ni) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int m = m0 + wm + mi * 16 + g + (e / 2) * 8, n = n0 + wn + ni * 8 + 2 * q + (e % 2);
        if (m < M && n < N) y[static_cast<size_t>(n) * ys + m] = acc[mi][ni][e];
      }
    }
  }
}

// One thread per Q8_0 block: 32 weights d * q rounded to bf16 (round to nearest even).
__global__ void dequant_q8_bf16_kernel(const uint8_t* __restrict__ w, size_t row_bytes, size_t rows, size_t cols,
                                       __nv_bfloat16* __restrict__ out) {
  const size_t blocks_per_row = cols / kQ8Block;
  for (size_t b = global_thread(); b < rows * blocks_per_row; b += global_threads()) {
    const size_t r = b / blocks_per_row, c = b % blocks_per_row;
    uint4 packed[4];
    q8_block_to_bf16(w + r * row_bytes + c * kQ8BlockBytes, packed);
    auto* dst = reinterpret_cast<uint4*>(out + r * cols + c * kQ8Block);
#pragma unroll
    for (int j = 0; j < 4; ++j) dst[j] = packed[j];
  }
}

// [n][cols] bf16 = silu(gate) * up rounded, two elements per thread (gate, up: [n][cols] f32). The
// f32 product is swiglu_kernel's (activation.cu), so this equals x_to_bf16 of swiglu's output bit
// for bit without the f32 round trip through memory (swiglu_matmul.h).
__global__ void swiglu_to_bf16_kernel(const float* __restrict__ gate, const float* __restrict__ up, size_t n,
                                      size_t cols, __nv_bfloat162* __restrict__ out) {
  for (size_t e = global_thread(); e < n * cols / 2; e += global_threads()) {
    const size_t i = 2 * e;  // rows are contiguous and cols is even: pairs never straddle rows
    out[e] = __floats2bfloat162_rn(silu(gate[i]) * up[i], silu(gate[i + 1]) * up[i + 1]);
  }
}

// x [n][xs] f32 -> [n][cols] bf16, two elements per thread (cols is even).
__global__ void x_to_bf16_kernel(const float* __restrict__ x, size_t xs, size_t n, size_t cols,
                                 __nv_bfloat162* __restrict__ out) {
  wait_for_previous_kernel();  // a no-op unless launched as a dependent (launch_x_to_bf16)
  const size_t half = cols / 2;
  for (size_t e = global_thread(); e < n * half; e += global_threads()) {
    const size_t t = e / half, c = (e % half) * 2;
    out[e] = __floats2bfloat162_rn(x[t * xs + c], x[t * xs + c + 1]);
  }
}

struct WorkspaceKey {
  int device;
  cudaStream_t stream;
  bool operator<(const WorkspaceKey& o) const {
    return device != o.device ? device < o.device : std::less<cudaStream_t>()(stream, o.stream);
  }
};
struct Workspace {
  void* ptr = nullptr;
  size_t bytes = 0;
};

}  // namespace

void* stream_workspace(size_t bytes, cudaStream_t stream, cudaError_t* err) {
  static std::mutex mu;
  static std::map<WorkspaceKey, Workspace> spaces;
  *err = cudaSuccess;
  int device = 0;
  if ((*err = cudaGetDevice(&device)) != cudaSuccess) return nullptr;
  const std::lock_guard<std::mutex> lock(mu);
  Workspace& ws = spaces[WorkspaceKey{device, stream}];
  if (ws.bytes >= bytes) return ws.ptr;
  if (ws.ptr != nullptr) {
    // Work queued on this stream may still read the old buffer: let it finish first.
    if ((*err = cudaStreamSynchronize(stream)) != cudaSuccess) return nullptr;
    cudaFree(ws.ptr);
    ws = Workspace{};
  }
  const size_t want = std::max(bytes, size_t{16} << 20);
  if ((*err = cudaMalloc(&ws.ptr, want)) != cudaSuccess) {
    ws = Workspace{};
    return nullptr;
  }
  ws.bytes = want;
  return ws.ptr;
}

namespace {

// The weights the per-call dequantization reads: Q8_0 in GGUF order, or split rows, which it loads
// 16 bytes at a time (launch_dequant_split; the workspace it writes is aligned).
bool tc_weights_ok(const cpu::WeightView& w) {
  if (w.type == GgmlType::Q8_0) return true;
  return w.type == GgmlType::Q8_0_SPLIT && aligned_to(w.data, 16) && w.row_bytes % 16 == 0;
}

}  // namespace

bool gemm_q8_tc_applies(const cpu::WeightView& w, size_t n_tokens) {
  return tc_weights_ok(w) && n_tokens >= kTcMinTokens && w.cols % kBK == 0 && w.cols <= (size_t{1} << 30) &&
         n_tokens <= (size_t{1} << 30);
}

namespace {

// The bf16 product of one weight slab (rows x K at a) with the bf16 activations: cuBLASLt when
// asked for and it has an algorithm for the shape, else the mma.sync kernel.
cudaError_t gemm_bf16(TcGemmKernel kernel, const __nv_bfloat16* a, const __nv_bfloat16* xb, size_t rows, size_t n,
                      size_t K, float* y, size_t ys, cudaStream_t stream) {
  if (kernel == TcGemmKernel::kCublasLt) {
    const cudaError_t e = gemm_bf16_lt(a, xb, rows, n, K, y, ys, stream);
    if (e != cudaErrorNotSupported) return e;
  }
  // Per call, not once per process: the attribute belongs to the current device (pipeline stages
  // on several GPUs in one process each need it); it costs a few microseconds.
  const cudaError_t attr =
      cudaFuncSetAttribute(gemm_bf16_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kSmemBytes));
  if (attr != cudaSuccess) return attr;
  const dim3 grid(static_cast<unsigned>((n + kBN - 1) / kBN), static_cast<unsigned>((rows + kBM - 1) / kBM));
  gemm_bf16_kernel<<<grid, kThreads, kSmemBytes, stream>>>(a, xb, static_cast<int>(rows), static_cast<int>(n),
                                                           static_cast<int>(K), y, ys);
  return cudaGetLastError();
}

// v2 (dequant_q8.cu) for the whole groups of 32 blocks when the rows are packed and aligned, v1
// for the rest (and everything when v2 does not apply, or v2 is false: tests and the kernel lab). Split rows (16-byte
// aligned, the callers check) have their own kernel whatever v2 says. Bit-identical outputs.
void launch_dequant(GgmlType type, const uint8_t* wq, size_t row_bytes, size_t rows, size_t K, __nv_bfloat16* out,
                    cudaStream_t stream, bool v2) {
  if (type == GgmlType::Q8_0_SPLIT) return launch_dequant_split(wq, row_bytes, rows, K, out, stream);
  if (v2 && dequant_v2_applies(wq, row_bytes, K, out)) {
    const size_t done = launch_dequant_v2(wq, rows, K, out, stream);
    const size_t left = rows * (K / kQ8Block) - done;
    if (left == 0) return;
    wq += done * kQ8BlockBytes;  // the tail as one packed row of `left` blocks
    out += done * kQ8Block;
    rows = 1;
    K = left * kQ8Block;
    row_bytes = left * kQ8BlockBytes;
  }
  dequant_q8_bf16_kernel<<<grid_for(rows * (K / kQ8Block), 256, 132 * 16), 256, 0, stream>>>(wq, row_bytes, rows, K,
                                                                                             out);
}

// Where the GEMM's bf16 activations come from: f32 rows x (stride xs), or, with `up`, the SwiGLU
// silu(x) * up of contiguous rows (swiglu_matmul).
struct Activations {
  const float* x;
  size_t xs;
  const float* up;
};

// How one matrix's product runs: the persistent copy is one slab; otherwise the weights are
// dequantized in row chunks of chunk_rows rows into w_bytes of workspace.
struct TcPlan {
  size_t chunk_rows = 0, w_bytes = 0;
};

TcPlan tc_plan(const cpu::WeightView& w, const __nv_bfloat16* persistent) {
  const size_t K = w.cols;
  TcPlan p;
  p.chunk_rows = std::max<size_t>(kBM, kChunkBytes / (K * 2) / kBM * kBM);
  p.chunk_rows = persistent != nullptr ? w.rows : std::min(p.chunk_rows, (w.rows + kBM - 1) / kBM * kBM);
  p.w_bytes = persistent != nullptr ? 0 : p.chunk_rows * K * 2;
  return p;
}

size_t x_workspace_bytes(size_t n, size_t K) {
  return (n * K * 2 + 255) / 256 * 256;
}

// The activations' bf16 operand at xb: f32 rows x (stride xs), or the SwiGLU silu(x) * up.
void convert_activations(const Activations& act, size_t n, size_t K, __nv_bfloat16* xb, cudaStream_t stream) {
  auto* xb2 = reinterpret_cast<__nv_bfloat162*>(xb);
  if (act.up != nullptr) {
    swiglu_to_bf16_kernel<<<grid_for(n * K / 2, 256, 132 * 16), 256, 0, stream>>>(act.x, act.up, n, K, xb2);
  } else {
    x_to_bf16_kernel<<<grid_for(n * K / 2, 256, 132 * 16), 256, 0, stream>>>(act.x, act.xs, n, K, xb2);
  }
}

// y = W xb for bf16 activations already at xb, the weights dequantized chunk by chunk into wb.
cudaError_t run_tc_chunks(const cpu::WeightView& w, const __nv_bfloat16* persistent, const TcPlan& plan,
                          const __nv_bfloat16* xb, __nv_bfloat16* wb, size_t n, float* y, size_t ys,
                          const TcGemmOptions& tc, cudaStream_t stream) {
  const size_t K = w.cols;
  const auto* wq = static_cast<const uint8_t*>(w.data);
  for (size_t r0 = 0; r0 < w.rows; r0 += plan.chunk_rows) {
    const size_t rows = std::min(plan.chunk_rows, w.rows - r0);
    const __nv_bfloat16* a = persistent != nullptr ? persistent + r0 * K : wb;
    if (persistent == nullptr) {
      launch_dequant(w.type, wq + r0 * w.row_bytes, w.row_bytes, rows, K, wb, stream, /*v2=*/true);
    }
    if (const cudaError_t e = gemm_bf16(tc.kernel, a, xb, rows, n, K, y + r0, ys, stream); e != cudaSuccess) return e;
  }
  return cudaGetLastError();
}

cudaError_t gemm_q8_tc_from(const cpu::WeightView& w, const Activations& act, size_t n, float* y, size_t ys,
                            const TcGemmOptions& tc, cudaStream_t stream) {
  if (!tc_weights_ok(w)) return cudaErrorNotSupported;  // never misread another layout
  const auto* persistent = static_cast<const __nv_bfloat16*>(tc.bf16_weights);
  if (persistent != nullptr && (w.rows + kBM - 1) / kBM > 65535) return cudaErrorInvalidValue;  // grid.y
  const TcPlan plan = tc_plan(w, persistent);
  const size_t x_bytes = x_workspace_bytes(n, w.cols);
  cudaError_t e = cudaSuccess;
  auto* ws = static_cast<unsigned char*>(stream_workspace(x_bytes + plan.w_bytes, stream, &e));
  if (ws == nullptr) return e;
  auto* xb = reinterpret_cast<__nv_bfloat16*>(ws);
  convert_activations(act, n, w.cols, xb, stream);
  return run_tc_chunks(w, persistent, plan, xb, reinterpret_cast<__nv_bfloat16*>(ws + x_bytes), n, y, ys, tc, stream);
}

}  // namespace

cudaError_t launch_x_to_bf16(const float* x, size_t xs, size_t n, size_t cols, __nv_bfloat16* out, cudaStream_t stream,
                             bool dependent) {
  if (cols % 2 != 0 || !aligned_to(out, 4)) return cudaErrorInvalidValue;
  return launch_maybe_dependent(x_to_bf16_kernel, dim3(grid_for(n * cols / 2, 256, 132 * 16)), dim3(256), 0, stream,
                                dependent && current_device_is_sm90_or_newer(), x, xs, n, cols,
                                reinterpret_cast<__nv_bfloat162*>(out));
}

cudaError_t gemm_q8_tc(const cpu::WeightView& w, const float* x, size_t xs, size_t n, float* y, size_t ys,
                       const TcGemmOptions& tc, cudaStream_t stream) {
  return gemm_q8_tc_from(w, Activations{x, xs, nullptr}, n, y, ys, tc, stream);
}

cudaError_t swiglu_gemm_q8_tc(const cpu::WeightView& w, const float* gate, const float* up, size_t n, float* y,
                              size_t ys, const TcGemmOptions& tc, cudaStream_t stream) {
  return gemm_q8_tc_from(w, Activations{gate, w.cols, up}, n, y, ys, tc, stream);
}

// Each segment is the product gemm_q8_tc would compute for its row range of w (the same chunks,
// the same operands, so the same bits); only the activations' conversion is shared. The
// workspace is requested once, at the largest segment's size, so it is not reallocated (which
// would drop the converted activations) between the segments.
cudaError_t gemm_q8_tc_rows(const cpu::WeightView& w, const float* x, size_t xs, size_t n, const RowSegments& out,
                            const TcGemmOptions& tc, cudaStream_t stream) {
  if (!tc_weights_ok(w)) return cudaErrorNotSupported;
  const auto* persistent = static_cast<const __nv_bfloat16*>(tc.bf16_weights);
  const size_t K = w.cols;
  size_t w_bytes = 0;
  for (int i = 0; i < out.n; ++i) {
    const cpu::WeightView seg = cpu::row_range(w, out.first[i], out.first[i + 1] - out.first[i]);
    if (persistent != nullptr && (seg.rows + kBM - 1) / kBM > 65535) return cudaErrorInvalidValue;  // grid.y
    w_bytes = std::max(w_bytes, tc_plan(seg, persistent).w_bytes);
  }
  const size_t x_bytes = x_workspace_bytes(n, K);
  cudaError_t e = cudaSuccess;
  auto* ws = static_cast<unsigned char*>(stream_workspace(x_bytes + w_bytes, stream, &e));
  if (ws == nullptr) return e;
  auto* xb = reinterpret_cast<__nv_bfloat16*>(ws);
  convert_activations(Activations{x, xs, nullptr}, n, K, xb, stream);
  for (int i = 0; i < out.n; ++i) {
    const cpu::WeightView seg = cpu::row_range(w, out.first[i], out.first[i + 1] - out.first[i]);
    const __nv_bfloat16* seg_copy = persistent != nullptr ? persistent + out.first[i] * K : nullptr;
    e = run_tc_chunks(seg, seg_copy, tc_plan(seg, seg_copy), xb, reinterpret_cast<__nv_bfloat16*>(ws + x_bytes), n,
                      out.y[i], out.ys[i], tc, stream);
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

}  // namespace ds::cuda::detail

namespace ds::cuda {

cudaError_t dequantize_q8_to_bf16(const WeightView& w, void* out, cudaStream_t stream, bool v2) {
  if (!detail::is_q8_0(w.type)) return cudaErrorNotSupported;
  const size_t align = detail::weight_alignment(w.type);  // 2, or 16 for split rows
  if (w.data == nullptr || out == nullptr || w.cols % detail::kQ8Block != 0 || !detail::aligned_to(out, 16) ||
      !detail::aligned_to(w.data, align) || w.row_bytes % align != 0 || w.row_bytes < ggml_row_bytes(w.type, w.cols)) {
    return cudaErrorInvalidValue;
  }
  if (w.rows == 0) return cudaSuccess;
  detail::launch_dequant(w.type, static_cast<const uint8_t*>(w.data), w.row_bytes, w.rows, w.cols,
                         static_cast<__nv_bfloat16*>(out), stream, v2);
  return cudaGetLastError();
}

cudaError_t prepare_tc_gemm(cudaStream_t stream) {
  return detail::gemm_lt_prepare(stream);
}

}  // namespace ds::cuda
