// Shared speculative-decoding drivers for the CPU (tests/worker/test_speculation.cpp) and CUDA
// (tests/kernels/cuda/test_cuda_speculation.cpp) tests: the same greedy plain-decode and
// speculate-and-verify loops, so both backends are held to one definition of "lossless".
#pragma once

#include <cstdint>
#include <vector>

#include "worker/stage_model.h"

namespace ds::test {

struct Generated {
  std::vector<int32_t> tokens;
  std::vector<std::vector<float>> logits;  // the target row each token was taken from
  uint64_t drafted = 0, accepted = 0;
  uint64_t digested_steps = 0;  // verify steps whose rows the model digested (no logits recorded)
  int32_t max_draft = -1;       // the largest token id SpecDecoder drafted
};

// Greedy decoding of `n_generate` tokens after `prompt` (sequence 1, one token per step).
Generated greedy_plain_decode(StageModel& stage, size_t n_vocab, const std::vector<int32_t>& prompt, size_t n_generate);

// Greedy speculative decoding with K drafts a step through SpecDecoder. `oracle`: when set,
// drafts come from it (with every third one corrupted) instead of the MTP block, so acceptance
// paths (partial acceptance, rewinds, bonus tokens) are exercised even though the fixture's
// MTP rarely agrees with the target.
// `ask_digests`: each step asks for greedy digests of its logit rows (StepInput::digest_rows,
// as the worker does for greedy sequences); where the model gives them, the verdict is taken
// on the digests and that step's `logits` entries are left empty.
Generated greedy_spec_decode(StageModel& stage, size_t n_embd, size_t n_vocab, const std::vector<int32_t>& prompt,
                             uint32_t K, const std::vector<int32_t>* oracle, size_t n_generate,
                             bool ask_digests = false);

}  // namespace ds::test
