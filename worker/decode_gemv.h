// Which GEMV the CUDA backend runs for 1..4-token products (decode steps, speculative verify
// rows; CudaBackendOptions::split_gemv_mma), from a worker's or the bench's --decode-gemv.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace ds {

// "mma": int8 tensor cores (kernels/cuda/gemv_q8_split_mma.cu: 1..4 tokens at one token's cost);
// "dp4a": the int8x3 / float dot GEMV; "auto": mma when the server speculates (spec_k > 0: a
// verify row of 1 + 3 at ~1.25x a decode step instead of ~1.75-2x), else dp4a.
// Not yet in auto: wide models. H200, 2026-11-30, decode step mma vs dp4a: 27B 9.99 vs 11.51 ms,
// 9B 3.48 vs 3.28 ms; the tensor-core kernel's 27B ffn_down width (17408 columns, a ring of 2
// slots a warp) has a parity test that has not run on a GPU yet. n_embd is where that rule goes.
inline bool decode_gemv_is_mma(const std::string& decode_gemv, uint32_t spec_k, size_t /*n_embd*/) {
  return decode_gemv == "mma" || (decode_gemv == "auto" && spec_k > 0);
}

}  // namespace ds
