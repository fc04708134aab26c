// Decode GEMV for split-rows Q8_0 weights on int8 tensor cores, 1..4 tokens a launch, with the
// same instruction stream for every token count (gemv_q8_split.cu variant kGemvSplitMmaVariant).
//
// Why: the dp4a GEMV (gemv_q8_split.cu) issues several times the instructions at 4 tokens as at 1
// and, at 16 warps per SM, cannot hide them, so a speculative verify row of 1 + 3 tokens costs far
// more than a decode step (measured: docs/history/performance-2026-11.md, session 10). Here one
// mma.m16n8k32.s8 takes one Q8_0 block of 16 rows against ALL FOUR tokens at once: its 8 B
// columns are the tokens' two int8 activation levels (column 2t: level a of token t, 2t + 1:
// level b). A missing token is just two columns whose outputs are never stored, so 1, 2, 3 or 4
// tokens run the same instructions: a verify row reads the weights once at about the cost of a
// one-token decode step, and a token's bits never depend on its companions (an mma output
// column depends on its own input column only: batch invariance by construction).
//
// Activations (int8x2_levels.h, which holds the representation and its bound): per 32-column block
// a scale u = max|x| / (254 * 127 + 127) and per column Q = 254 a + b, a, b int8, here
// Q = rint(x * (254 * 127 + 127) / max|x|) (one reciprocal per block instead of a division per
// column): |x - u Q| <= 0.506 u < 2^-15.95 max|x_block|. Each warp quantizes the columns it
// multiplies (the same in every tile) once into shared memory at the start: levels [32-col
// block][8 columns][32 bytes], scales [32-col block][4 tokens]. With `up`, x is the FFN's
// silu(gate) * up (the swiglu kernel's f32 expression), so ffn_down needs no SwiGLU launch.
// Every block quantizes again what the others do; for a wide input at several tokens (the verify
// row's down projection: silu, 12 passes a warp) the caller may instead pass a scratch that one
// launch of its own (quantize_acts_kernel, the same quantize_eight) fills and the warps copy.
//
// Product per (row, token, block): the mma's two int32 sums ca = sum q a, cb = sum q b are exact
// (|c| < 2^22; accumulators start at the bits of 1.5 * 2^23, so one FADD reads them as floats),
// v = fma(ca, 254, cb) (one rounding), acc = fma(v, d * u, acc). Error against the exact product
// of the dequantized weights and x: sum_i |w_i| 2^-15.95 max|x_block(i)| from the activations,
// plus f32 rounding (test_cuda_gemv_split.cpp states the bound).
//
// Work split: tiles of 16 rows; a tile's columns in stages of 128 (4 blocks), warp w of the
// block taking stages w, w + W, ... in order (W depends on the shape only). The warp copies each
// stage (16 rows x 128 quants + the rows' 4 fp16 scales) into its own ring of 2-5 slots in shared
// memory with cp.async (the next ones in flight while one is computed, across tiles too; the
// first ones before the activations are quantized), then lane (g, t4) reads 8 bytes of rows g and
// g + 8 per block: the fragment's k order is a permutation of the block's columns, the same for A
// and B (lane t4 holds columns 8 t4 .. 8 t4 + 7, its low word at k 4 t4, its high word at k 16 +
// 4 t4). A persistent grid (one block of 16 warps per SM by default): block b takes tiles b,
// b + gridDim.x, ...; after each tile the warps' partials [warp][row][token] are summed in warp
// order (double-buffered in shared memory: one barrier per tile).
#include "kernels/cuda/gemv_q8_split_mma_kernels.cuh"
#include "kernels/cuda/matmul_fast.h"

namespace ds::cuda::detail {

size_t gemv_q8_split_mma_act_bytes(size_t cols) {
  return cols / kQ8Block * (kLevelBytes + kTokens * sizeof(float));
}

cudaError_t gemv_q8_split_mma(const cpu::WeightView& w, const float* x, const float* up, size_t xs, size_t n,
                              const RowSegments& out, cudaStream_t stream, bool pdl, void* act_scratch) {
  return launch_split_mma(kDefaultMmaShape, w, x, up, xs, n, out, stream, pdl, act_scratch);
}

}  // namespace ds::cuda::detail
