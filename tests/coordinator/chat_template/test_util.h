// Helpers for the chat template tests.
#pragma once

#include <rapidjson/document.h>

#include <stdexcept>
#include <string>

#include "coordinator/chat_template/chat_template.h"
#include "coordinator/chat_template/json.h"

namespace ds::test {

inline rapidjson::Document parse_json(const std::string& s) {
  rapidjson::Document d;
  d.Parse<rapidjson::kParseFullPrecisionFlag>(s.c_str(), s.size());
  if (d.HasParseError()) throw std::runtime_error("bad test JSON: " + s);
  return d;
}

// Renders `src` with the members of the JSON object `ctx` as template variables (untrusted,
// like request data). `messages` stays an empty list unless ctx provides one.
inline PromptText render_prompt(const std::string& src, const std::string& ctx = "{}") {
  ChatRequestInput in;
  in.add_generation_prompt = false;
  const rapidjson::Document d = parse_json(ctx);
  for (const auto& m : d.GetObject()) {
    const std::string name(m.name.GetString(), m.name.GetStringLength());
    if (name == "messages") {
      in.messages = jinja::value_from_json(m.value);
    } else {
      in.extra_kwargs.emplace_back(name, jinja::value_from_json(m.value));
    }
  }
  return ChatTemplate::from_source(src).render(in);
}

inline std::string render(const std::string& src, const std::string& ctx = "{}") {
  return render_prompt(src, ctx).text;
}

}  // namespace ds::test
