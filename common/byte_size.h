// Byte counts in option values and messages, shared by the coordinator's and the worker's
// option parsers: "4G", "512M", "64K", "1048576" (units are binary: K = 1024).
#pragma once

#include <cstdint>
#include <string>

namespace ds {

// "4G" / "4GiB" / "512M" / "64k" / "1048576" -> bytes. False for anything else (empty, a
// fraction, a negative number, an unknown unit) or a value that overflows 64 bits.
bool parse_byte_size(const std::string& text, uint64_t* out);

// 3407872 -> "3.25 MiB" (B, KiB, MiB, GiB or TiB, two decimals), for log lines and errors.
std::string format_bytes(uint64_t bytes);

}  // namespace ds
