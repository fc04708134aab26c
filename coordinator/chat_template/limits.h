// Guards against runaway templates. A GGUF template is third-party input and request data
// steers its loops, so every render is bounded in output, recursion and iterations.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ds::jinja {

struct Limits {
  size_t max_output_bytes = 64u << 20;      // any single string or rendered output
  int max_call_depth = 64;                  // nested macro calls
  uint64_t max_loop_iterations = 1u << 22;  // total for-loop iterations (and range() size) per render
  int max_nesting = 200;                    // parser: nested expressions/blocks
};

}  // namespace ds::jinja
