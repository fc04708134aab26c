// Internal: the grouped regime's expert products on bf16 tensor cores (moe_gemm_tc.cu), the bf16
// prefill mode's replacement of moe.cu's f32 tile kernels (kernels/cuda/moe.h explains the
// regimes; moe.cu sorts the pairs and combines the rows, these two launches do the products).
//
// A tile is up to kMoeTcTilePairs (token, slot) pairs of one expert (moe.cu's device sort). Both
// kernels are one launch over all tiles x row blocks (blocks of 8 warps, 128 gate + 128 up rows or
// 256 down rows): A = the expert's Q8_0 rows widened to bf16(d * q) in registers (the operand every
// Q8_0 -> bf16 path of the project shares; split rows are staged in shared memory by cp.async
// first, 3 slices of 128 columns deep, GGUF-order rows are loaded straight into registers), B = the
// tile's gathered bf16 rows staged in shared memory (cp.async; groups of 8 padding slots are
// neither staged nor multiplied), mma.sync m16n8k16 with f32 accumulation over K in one fixed order
// per output element:
//  * gate_up: h[p][r] = bf16(silu(gate_e[r] . xb[p / k]) * (up_e[r] . xb[p / k])), gate and up rows
//    in the same warp, so the SwiGLU is the epilogue;
//  * down: part[p][r] = down_e[r] . h[p] (f32), which moe.cu's combine kernel sums in slot order.
// A pair's result depends only on its own operands (an mma column is its pair's alone; which
// other pairs share the tile, and in which slot, changes no bit): batch invariance holds within
// the bf16 grouped regime. It differs from the f32 regimes by the bf16 roundings (|err| <= 4e-3
// sum|w x| per product, the bound of the dense bf16 prefill GEMMs).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "common/ggml_types.h"

namespace ds::cuda::detail {

// Pairs per tile of the tensor-core kernels (8 mma columns of 8).
inline constexpr int kMoeTcTilePairs = 64;

struct MoeTcProblem {
  const __nv_bfloat16* xb = nullptr;     // [T][D] the tokens' rows in bf16
  const int32_t* tile_expert = nullptr;  // [n_tiles] expert of each tile, -1: unused
  const int32_t* tile_pairs = nullptr;   // [n_tiles][kMoeTcTilePairs] pair indices, -1 after the last
  int n_tiles = 0;
  const uint8_t* gate = nullptr;
  const uint8_t* up = nullptr;
  const uint8_t* down = nullptr;
  size_t gate_row_bytes = 0, down_row_bytes = 0;
  GgmlType gate_type = GgmlType::Q8_0, down_type = GgmlType::Q8_0;
  __nv_bfloat16* h = nullptr;  // [P][F]
  float* part = nullptr;       // [P][D]
  int n_experts = 0, k = 0, dim = 0, ffn = 0;
};

// Whether the kernels take this shape: Q8_0 (either layout) gate / up / down, D and F multiples
// of the 128-column K slice.
bool moe_tc_applies(GgmlType gate, GgmlType down, size_t dim, size_t ffn);
cudaError_t moe_tc_gate_up(const MoeTcProblem& p, cudaStream_t stream);
cudaError_t moe_tc_down(const MoeTcProblem& p, cudaStream_t stream);

}  // namespace ds::cuda::detail
