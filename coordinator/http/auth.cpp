#include "coordinator/http/auth.h"

#include <cctype>
#include <cstddef>

namespace ds {

bool constant_time_equals(std::string_view given, std::string_view expected) {
  // Always walk `expected`; a length mismatch is folded into the accumulator instead of
  // returning early.
  unsigned diff = given.size() == expected.size() ? 0u : 1u;
  for (size_t i = 0; i < expected.size(); ++i) {
    const unsigned char g = given.empty() ? 0 : static_cast<unsigned char>(given[i % given.size()]);
    diff |= g ^ static_cast<unsigned char>(expected[i]);
  }
  return diff == 0;
}

bool bearer_authorized(std::string_view authorization, std::string_view expected) {
  if (expected.empty()) return true;
  constexpr std::string_view kScheme = "bearer ";
  if (authorization.size() < kScheme.size()) return false;
  for (size_t i = 0; i < kScheme.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(authorization[i])) != kScheme[i]) return false;
  }
  std::string_view token = authorization.substr(kScheme.size());
  while (!token.empty() && token.front() == ' ') token.remove_prefix(1);
  while (!token.empty() && (token.back() == ' ' || token.back() == '\t')) token.remove_suffix(1);
  return constant_time_equals(token, expected);
}

}  // namespace ds
