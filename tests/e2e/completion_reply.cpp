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

}  // namespace ds::test
