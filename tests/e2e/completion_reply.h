// Reading /v1/completions replies in e2e tests (needs rapidjson, so it is kept out of
// server_process.h, which tests without rapidjson share).
#pragma once

#include <string>

#include "tests/e2e/server_process.h"

namespace ds::test {

// Text, finish reason, token count and every token (logprobs.tokens) of a non-streamed reply in
// one string, so a difference in any token shows when two replies are compared; the status and
// body instead when it is not a 200 with choices.
std::string completion_outcome(const HttpReply& r);

// The concatenated choices[0].text of a completions SSE body (so far); events without text
// (usage chunk, [DONE]) add nothing.
std::string streamed_completion_text(const std::string& body);

}  // namespace ds::test
