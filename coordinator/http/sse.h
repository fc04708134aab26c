// Server-sent events framing (text/event-stream), as OpenAI streams use it.
#pragma once

#include <string>
#include <string_view>

namespace ds {

inline constexpr std::string_view kSseContentType = "text/event-stream";

// One `data:` event. Payloads are single-line JSON (RapidJSON's compact writer never emits a
// raw newline), so no splitting into several data lines is needed.
inline std::string sse_event(std::string_view data) {
  std::string out;
  out.reserve(data.size() + 8);
  out.append("data: ").append(data).append("\n\n");
  return out;
}

inline std::string sse_done() {
  return "data: [DONE]\n\n";
}

}  // namespace ds
