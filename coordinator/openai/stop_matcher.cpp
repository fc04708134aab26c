#include "coordinator/openai/stop_matcher.h"

#include <algorithm>

namespace ds::openai {

StopMatcher::StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {
  std::erase_if(stops_, [](const std::string& s) { return s.empty(); });
}

StopMatcher::Result StopMatcher::feed(std::string_view text) {
  Result r;
  if (stopped_) return r;
  if (stops_.empty()) {
    r.text.assign(text);
    return r;
  }
  held_.append(text);
  size_t first = std::string::npos;
  for (const std::string& s : stops_) first = std::min(first, held_.find(s));
  if (first != std::string::npos) {
    stopped_ = true;
    r.stopped = true;
    r.text = held_.substr(0, first);
    held_.clear();
    return r;
  }
  // Keep the longest tail that is a proper prefix of some stop string. It starts where a stop
  // string starts, i.e. on a character boundary, so both parts stay valid UTF-8.
  size_t keep = 0;
  for (const std::string& s : stops_) {
    const size_t max_len = std::min(s.size() - 1, held_.size());
    for (size_t len = max_len; len > keep; --len) {
      if (held_.compare(held_.size() - len, len, s, 0, len) == 0) {
        keep = len;
        break;
      }
    }
  }
  r.text = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return r;
}

std::string StopMatcher::flush() {
  std::string out;
  out.swap(held_);
  return stopped_ ? std::string() : out;
}

}  // namespace ds::openai
