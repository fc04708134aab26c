// Byte counts (see byte_size.h).
#include "common/byte_size.h"

#include <cctype>
#include <charconv>
#include <cstdio>

namespace ds {

bool parse_byte_size(const std::string& text, uint64_t* out) {
  uint64_t value = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc() || ptr == text.data()) return false;
  std::string unit(ptr, end);
  for (char& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (unit.size() == 3 && unit.substr(1) == "IB") unit.resize(1);  // "GiB" -> "G"
  unsigned shift = 0;
  if (unit.empty() || unit == "B") {
    shift = 0;
  } else if (unit == "K") {
    shift = 10;
  } else if (unit == "M") {
    shift = 20;
  } else if (unit == "G") {
    shift = 30;
  } else if (unit == "T") {
    shift = 40;
  } else {
    return false;
  }
  if (shift != 0 && value > (UINT64_MAX >> shift)) return false;
  *out = value << shift;
  return true;
}

std::string format_bytes(uint64_t bytes) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  size_t u = 0;
  while (v >= 1024.0 && u + 1 < sizeof kUnits / sizeof kUnits[0]) {
    v /= 1024.0;
    ++u;
  }
  char buf[48];
  if (u == 0) {
    std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(bytes));
  } else {
    std::snprintf(buf, sizeof buf, "%.2f %s", v, kUnits[u]);
  }
  return buf;
}

}  // namespace ds
