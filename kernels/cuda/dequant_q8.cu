// Q8_0 -> bf16 dequantization for the prefill GEMM's weight operand (dequant_q8.h).
//
// v1 (gemm_tc.cu) gives each thread one 34-byte block and reads it with 17 two-byte loads: a
// warp's load instruction touches 32 blocks 34 bytes apart, so every sector is fetched from L1
// again and again, and its 16-byte stores land 64 bytes apart (measured well below the copy
// bandwidth: docs/history/performance-2026-11.md). Here a warp takes 32 consecutive blocks (1088
// bytes, 16-byte aligned when the rows are packed): three coalesced 16-byte loads per lane into
// shared memory, each lane decodes one block from there, and the 2 KB of bf16 leave through
// shared memory as four coalesced 16-byte stores per lane. Arithmetic is v1's (d * q rounded to
// nearest-even bf16), so the two outputs are bit-identical.
#include <cuda_bf16.h>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/dequant_q8.h"
#include "kernels/cuda/weights.cuh"

namespace ds::cuda::detail {
namespace {

constexpr int kWarpsPerBlock = 8;
constexpr int kGroupBlocks = 32;                                 // Q8_0 blocks per warp step
constexpr int kGroupInVecs = kGroupBlocks * kQ8BlockBytes / 16;  // 68 x 16 bytes in
constexpr int kGroupOutVecs = kGroupBlocks * kQ8Block * 2 / 16;  // 128 x 16 bytes out
static_assert(kGroupBlocks * kQ8BlockBytes % 16 == 0, "a group is whole 16-byte vectors");

__global__ void __launch_bounds__(kWarpsPerBlock* kWarp)
    dequant_v2_kernel(const uint8_t* __restrict__ w, size_t groups, __nv_bfloat16* __restrict__ out) {
  __shared__ uint4 in_s[kWarpsPerBlock][kGroupInVecs];
  __shared__ uint4 out_s[kWarpsPerBlock][kGroupOutVecs];
  const int warp = static_cast<int>(threadIdx.x) / kWarp, lane = static_cast<int>(threadIdx.x) % kWarp;
  for (size_t g = size_t{blockIdx.x} * kWarpsPerBlock + warp; g < groups; g += size_t{gridDim.x} * kWarpsPerBlock) {
    const uint4* src = reinterpret_cast<const uint4*>(w + g * (kGroupBlocks * kQ8BlockBytes));
    const uint4 a = src[lane], b = src[lane + kWarp];
    const uint4 c = lane + 2 * kWarp < kGroupInVecs ? src[lane + 2 * kWarp] : uint4{};
    in_s[warp][lane] = a;
    in_s[warp][lane + kWarp] = b;
    if (lane + 2 * kWarp < kGroupInVecs) in_s[warp][lane + 2 * kWarp] = c;
    __syncwarp();
    uint4 packed[4];
    q8_block_to_bf16(reinterpret_cast<const uint8_t*>(in_s[warp]) + lane * kQ8BlockBytes, packed);
#pragma unroll
    for (int j = 0; j < 4; ++j) out_s[warp][4 * lane + j] = packed[j];
    __syncwarp();
    auto* dst = reinterpret_cast<uint4*>(out + g * (kGroupBlocks * kQ8Block));
#pragma unroll
    for (int j = 0; j < 4; ++j) dst[lane + kWarp * j] = out_s[warp][lane + kWarp * j];
    __syncwarp();  // out_s and in_s are rewritten by the next group
  }
}

// Split rows: the quants are contiguous and 16-byte aligned, so no staging is needed: each thread
// converts 16 of them (one 16-byte load, its block's scale, two 16-byte stores); a warp reads
// 512 consecutive bytes and writes 1 KB. Arithmetic is v1's (d * q rounded to nearest-even bf16).
constexpr size_t kSplitVecCols = 16;

__global__ void dequant_split_kernel(const uint8_t* __restrict__ w, size_t row_bytes, size_t rows, size_t cols,
                                     __nv_bfloat16* __restrict__ out) {
  const size_t vecs_per_row = cols / kSplitVecCols;
  for (size_t v = global_thread(); v < rows * vecs_per_row; v += global_threads()) {
    const size_t r = v / vecs_per_row, c = v % vecs_per_row * kSplitVecCols;
    const uint8_t* row = w + r * row_bytes;
    const uint4 q = *reinterpret_cast<const uint4*>(row + c);
    const float d = half_bits_to_float(load_u16(row + cols + 2 * (c / kQ8Block)));
    const uint32_t words[4] = {q.x, q.y, q.z, q.w};
    uint4 packed[2];
    auto* h = reinterpret_cast<__nv_bfloat162*>(packed);
#pragma unroll
    for (int j = 0; j < 8; ++j) h[j] = q8_pair_to_bf16(d, words[j / 2] >> (16 * (j % 2)));  // quants 2j, 2j + 1
    auto* dst = reinterpret_cast<uint4*>(out + r * cols + c);
    dst[0] = packed[0];
    dst[1] = packed[1];
  }
}

}  // namespace

void launch_dequant_split(const uint8_t* w, size_t row_bytes, size_t rows, size_t cols, __nv_bfloat16* out,
                          cudaStream_t stream) {
  const size_t vecs = rows * (cols / kSplitVecCols);
  if (vecs == 0) return;
  dequant_split_kernel<<<grid_for(vecs, 256, 132 * 16), 256, 0, stream>>>(w, row_bytes, rows, cols, out);
}

bool dequant_v2_applies(const uint8_t* w, size_t row_bytes, size_t cols, const void* out) {
  return cols % kQ8Block == 0 && row_bytes == cols / kQ8Block * kQ8BlockBytes && aligned_to(w, 16) &&
         aligned_to(out, 16);
}

size_t launch_dequant_v2(const uint8_t* w, size_t rows, size_t cols, __nv_bfloat16* out, cudaStream_t stream) {
  const size_t groups = rows * (cols / kQ8Block) / kGroupBlocks;
  if (groups == 0) return 0;
  const unsigned grid = grid_for(groups, kWarpsPerBlock, 132 * 32);
  dequant_v2_kernel<<<grid, kWarpsPerBlock * kWarp, 0, stream>>>(w, groups, out);
  return groups * kGroupBlocks;
}

}  // namespace ds::cuda::detail
