// Which GEMV the CUDA backend runs for 1..4-token products (decode steps, speculative verify
// rows; CudaBackendOptions::split_gemv_mma), from a worker's or the bench's --decode-gemv.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace ds {

// "mma": int8 tensor cores (kernels/cuda/gemv_q8_split_mma.cu: 1..4 tokens at one token's cost);
// "dp4a": the int8x3 / float dot GEMV; "auto": mma when the server speculates (spec_k > 0: a
// verify row of 1 + 3 at little more than a decode step's cost) or the model is wider than
// 4096 (where mma is also the faster one-token GEMV; at 4096 dp4a is), else dp4a (measured:
// docs/PERFORMANCE.md, Decisions measured, decode GEMV).
inline constexpr size_t kMmaDecodeMinEmbd = 4097;
inline bool decode_gemv_is_mma(const std::string& decode_gemv, uint32_t spec_k, size_t n_embd) {
  return decode_gemv == "mma" || (decode_gemv == "auto" && (spec_k > 0 || n_embd >= kMmaDecodeMinEmbd));
}

}  // namespace ds
