// Writes a random-weight qwen35 GGUF of a given shape: real metadata keys, every tensor of the
// real model, Q8_0 matrices and F32 small tensors. Deterministic for a seed: each chunk of rows
// draws from its own generator, seeded by (seed, tensor name, first row), so the bytes do not
// depend on the thread count, and a tensor's values do not depend on which others exist.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tools/synth/gguf_stream.h"
#include "tools/synth/shapes.h"

namespace ds::synth {

struct SynthSummary {
  size_t n_tensors = 0;
  uint64_t n_params = 0;
  uint64_t file_bytes = 0;
  double seconds = 0;
};

// Threads <= 0: one per hardware thread. `tokenizer_from`: a GGUF whose tokenizer.* keys are
// copied (padded to the shape's vocabulary); empty: the built-in minimal tokenizer (see
// tokenizer_keys.h). Throws ds::FormatError on I/O failure and ds::ConfigError for an unusable
// tokenizer source, in which case `path` is not created.
SynthSummary write_synth_gguf(const SynthShape& shape, const std::string& path, uint64_t seed, int threads,
                              const std::string& tokenizer_from = {});

// The common part of every synthetic file: declares `plan`'s tensors on `w` (whose metadata the
// caller has added, and no tensors yet), creates `path` and fills them with random values of
// their Init (Q8_0, F16 or F32) on `threads` threads, deterministically for `seed`.
SynthSummary write_planned(GgufStreamWriter& w, const std::vector<TensorPlan>& plan, const std::string& path,
                           uint64_t seed, int threads);

}  // namespace ds::synth
