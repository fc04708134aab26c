// Bearer-token authentication for the API key (--api-key).
#pragma once

#include <string_view>

namespace ds {

// Compares in time that depends only on `expected`'s length, so response timing does not
// reveal how many leading bytes of a guess were right.
bool constant_time_equals(std::string_view given, std::string_view expected);

// True when `authorization` is "Bearer <expected>" (scheme case-insensitive). An empty
// `expected` disables authentication: always true.
bool bearer_authorized(std::string_view authorization, std::string_view expected);

}  // namespace ds
