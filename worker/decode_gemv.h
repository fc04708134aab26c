// Which GEMV the CUDA backend runs for 1..4-token products (decode steps, speculative verify
// rows; CudaBackendOptions::split_gemv_mma), from a worker's or the bench's --decode-gemv.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace ds {

// "mma": int8 tensor cores (kernels/cuda/gemv_q8_split_mma.cu: 1..4 tokens at one token's cost);
// "dp4a": the int8x3 / float dot GEMV; "auto": mma when the server speculates (spec_k > 0: a
// verify row of 1 + 3 at ~1.15x a decode step instead of ~1.75x) or the model is wider than
// 4096 (where mma is also the faster one-token GEMV), else dp4a. H200 (PERFORMANCE.md, sessions 10
// and 11): a 27B step's GEMVs (n_embd 5120) 8.63 vs 9.64 ms, its decode step 9.99 vs 11.51 ms; a
// 9B step's (4096) 2.92 vs 2.61 ms, its decode step 3.50 vs 3.29 ms.
inline constexpr size_t kMmaDecodeMinEmbd = 4097;
inline bool decode_gemv_is_mma(const std::string& decode_gemv, uint32_t spec_k, size_t n_embd) {
  return decode_gemv == "mma" || (decode_gemv == "auto" && (spec_k > 0 || n_embd >= kMmaDecodeMinEmbd));
}

}  // namespace ds
