// Error types shared by every process. Errors carry a human-readable message that names
// the offending input (a GGUF key, a tensor, a flag) so operators can act on it.
#pragma once

#include <stdexcept>
#include <string>

namespace ds {

// A file or message from outside failed validation (bad GGUF, bad protobuf frame, ...).
class FormatError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The model described by a valid file is not one we can run, or is internally inconsistent.
class ConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace ds
