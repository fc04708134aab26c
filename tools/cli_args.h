// Command-line parsing shared by the deltaserve-* tools (logits, bench, synth): a cursor over
// argv, decimal integers and comma-separated integer lists. Every error goes through
// Usage::fail, which prints "<tool>: <error>" and the usage line to stderr and exits with 2.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "common/kv_options.h"

namespace ds::cli {

struct Usage {
  const char* tool;      // "deltaserve-bench"
  const char* synopsis;  // what follows the tool name on the usage line

  [[noreturn]] void fail(const std::string& error) const;
  // The usage line on stdout, exit status 0 (--help / -h).
  [[noreturn]] void help() const;
};

// Walks argv[1..argc): `for (std::string a; args.next(a);) { if (a == "--x") x = args.value(); ... }`.
class ArgReader {
 public:
  ArgReader(const Usage& usage, int argc, char** argv) : usage_(usage), argc_(argc), argv_(argv) {}

  // Moves to the next argument and stores it in `flag`; false when there is none.
  bool next(std::string& flag) {
    if (++i_ >= argc_) return false;
    flag = argv_[i_];
    return true;
  }
  // Consumes and returns the argument after the current flag; fails "<flag> needs a value".
  std::string value();
  // Fails "unknown argument '<flag>'" for the current argument; --help / -h print the usage instead.
  [[noreturn]] void unknown() const;

 private:
  std::string flag() const { return argv_[i_]; }

  const Usage& usage_;
  int argc_;
  char** argv_;
  int i_ = 0;
};

// `v` as a decimal integer (digits only) in [min, max]; otherwise fails with
// "<flag> needs an integer in [min, max], got '<v>'" (">= min" when max is unbounded).
uint64_t parse_uint(const Usage& usage, const std::string& flag, const std::string& v, uint64_t min,
                    uint64_t max = std::numeric_limits<uint64_t>::max());

// parse_uint into T (a non-negative range of T; max defaults to T's largest value).
template <typename T>
T parse_number(const Usage& usage, const std::string& flag, const std::string& v, T min,
               T max = std::numeric_limits<T>::max()) {
  return static_cast<T>(parse_uint(usage, flag, v, static_cast<uint64_t>(min), static_cast<uint64_t>(max)));
}

// The comma-separated items of `v` ("a,,b" has an empty middle item; a trailing comma adds none).
std::vector<std::string> split_commas(const std::string& v);

// A comma-separated list of integers in [min, max] ("1,2,3"); fails "<flag> is empty" when it
// holds none.
template <typename T>
std::vector<T> parse_list(const Usage& usage, const std::string& flag, const std::string& v, T min,
                          T max = std::numeric_limits<T>::max()) {
  std::vector<T> out;
  for (const std::string& item : split_commas(v)) out.push_back(parse_number<T>(usage, flag, item, min, max));
  if (out.empty()) usage.fail(flag + " is empty");
  return out;
}

// --kv-cache-type T / --kv-cache-type-k T / --kv-cache-type-v T (common/kv_options.h): true when
// `flag` is one of them, its value read from `args` into `out`; a T that is no KV type fails
// "<flag> must be one of f32, bf16, ...".
bool kv_cache_flag(const Usage& usage, const std::string& flag, ArgReader& args, KvTypeFlags* out);

}  // namespace ds::cli
