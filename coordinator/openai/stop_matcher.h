// Stop strings on decoded text (OpenAI `stop`): generation ends at the first occurrence of
// any stop string, which is trimmed from the output together with everything after it.
// Text that could be the start of a stop string is held back until it is decided, so a
// streaming client never sees a stop string's prefix that later turns into a match.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace ds::openai {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);

  struct Result {
    std::string text;      // safe to emit now
    bool stopped = false;  // a stop string was found; `text` ends right before it
  };
  // `text` must be whole UTF-8 characters (the held-back tail then is too).
  Result feed(std::string_view text);
  // End of generation: releases the held-back tail.
  std::string flush();
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  std::string held_;
  bool stopped_ = false;
};

}  // namespace ds::openai
