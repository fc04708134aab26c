#include "tests/e2e/completion_reply.h"

#include <rapidjson/document.h>

#include <sstream>

namespace ds::test {

std::string completion_outcome(const HttpReply& r) {
  if (r.status != 200) return "HTTP " + std::to_string(r.status) + ": " + r.body;
  rapidjson::Document d;
  d.Parse(r.body.c_str());
  if (d.HasParseError() || !d.HasMember("choices")) return "bad body: " + r.body;
  const auto& c = d["choices"][0];
  std::ostringstream s;
  s << c["text"].GetString() << "|" << c["finish_reason"].GetString() << "|"
    << d["usage"]["completion_tokens"].GetUint();
  if (c.HasMember("logprobs") && c["logprobs"].IsObject() && c["logprobs"].HasMember("tokens")) {
    for (const auto& t : c["logprobs"]["tokens"].GetArray()) s << "|" << t.GetString();
  }
  return s.str();
}

std::string streamed_completion_text(const std::string& body) {
  std::string text;
  for (const std::string& e : sse_events(body)) {
    if (e == "[DONE]") continue;
    rapidjson::Document d;
    d.Parse(e.c_str());
    if (d.HasParseError() || !d.IsObject() || !d.HasMember("choices") || d["choices"].Empty()) continue;
    const auto& c = d["choices"][0];
    if (c.HasMember("text") && c["text"].IsString()) text += c["text"].GetString();
  }
  return text;
}

}  // namespace ds::test
