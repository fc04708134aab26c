#include "coordinator/openai/response_json.h"

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <cmath>

#include "common/utf8.h"

namespace ds::openai {

namespace {

using Writer = rapidjson::Writer<rapidjson::StringBuffer>;

void str(Writer& w, std::string_view s) {
  w.String(s.data(), static_cast<rapidjson::SizeType>(s.size()));
}

void key_str(Writer& w, const char* key, std::string_view s) {
  w.Key(key);
  str(w, s);
}

void finish_reason_field(Writer& w, const std::string& finish_reason) {
  w.Key("finish_reason");
  if (finish_reason.empty()) {
    w.Null();
  } else {
    str(w, finish_reason);
  }
}

void header(Writer& w, const ResponseMeta& meta, const char* object) {
  key_str(w, "id", meta.id);
  key_str(w, "object", object);
  w.Key("created");
  w.Int64(meta.created);
  key_str(w, "model", meta.model);
}

void usage_object(Writer& w, const Usage& u) {
  w.Key("usage");
  w.StartObject();
  w.Key("prompt_tokens");
  w.Uint(u.prompt_tokens);
  w.Key("completion_tokens");
  w.Uint(u.completion_tokens);
  w.Key("total_tokens");
  w.Uint(u.prompt_tokens + u.completion_tokens);
  w.Key("prompt_tokens_details");
  w.StartObject();
  w.Key("cached_tokens");
  w.Uint(u.cached_tokens);
  w.EndObject();
  if (u.speculative) {
    w.Key("speculative");
    w.StartObject();
    w.Key("drafted_tokens");
    w.Uint64(u.speculative->drafted);
    w.Key("accepted_tokens");
    w.Uint64(u.speculative->accepted);
    w.Key("mean_accepted_length");
    w.Double(u.speculative->mean_accepted_length());
    w.EndObject();
  }
  w.EndObject();
}

std::string token_string(const Tokenizer& tok, int32_t id) {
  try {
    return sanitize_utf8(tok.token_piece(id, /*render_control=*/true));
  } catch (const std::out_of_range&) {
    return {};
  }
}

std::string_view raw_piece(const Tokenizer& tok, int32_t id) {
  try {
    return tok.token_piece(id, /*render_control=*/true);
  } catch (const std::out_of_range&) {
    return {};
  }
}

// Chat form: {"content":[{"token","logprob","bytes","top_logprobs":[...]}]}
void chat_logprobs(Writer& w, const LogprobsView& lp) {
  w.Key("logprobs");
  if (lp.tokens == nullptr) {
    w.Null();
    return;
  }
  auto entry = [&](int32_t id, float logprob) {
    key_str(w, "token", token_string(*lp.tokenizer, id));
    w.Key("logprob");
    w.Double(logprob);
    w.Key("bytes");
    w.StartArray();
    for (const char c : raw_piece(*lp.tokenizer, id)) w.Uint(static_cast<unsigned char>(c));
    w.EndArray();
  };
  w.StartObject();
  w.Key("content");
  w.StartArray();
  for (const GeneratedToken& t : *lp.tokens) {
    w.StartObject();
    entry(t.token, t.logprob);
    w.Key("top_logprobs");
    w.StartArray();
    for (const TokenLogprob& alt : t.top_logprobs) {
      w.StartObject();
      entry(alt.token, alt.logprob);
      w.EndObject();
    }
    w.EndArray();
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
}

// Legacy completions form: parallel arrays.
void completion_logprobs(Writer& w, const LogprobsView& lp) {
  w.Key("logprobs");
  if (lp.tokens == nullptr) {
    w.Null();
    return;
  }
  const Tokenizer& tok = *lp.tokenizer;
  w.StartObject();
  w.Key("tokens");
  w.StartArray();
  for (const auto& t : *lp.tokens) str(w, token_string(tok, t.token));
  w.EndArray();
  // A NaN logprob (a prompt's first token, under echo) is null, as its top_logprobs.
  w.Key("token_logprobs");
  w.StartArray();
  for (const auto& t : *lp.tokens) {
    if (std::isnan(t.logprob)) {
      w.Null();
    } else {
      w.Double(t.logprob);
    }
  }
  w.EndArray();
  w.Key("top_logprobs");
  w.StartArray();
  for (const auto& t : *lp.tokens) {
    if (std::isnan(t.logprob)) {
      w.Null();
      continue;
    }
    w.StartObject();
    for (const auto& alt : t.top_logprobs) {
      str(w, token_string(tok, alt.token));
      w.Double(alt.logprob);
    }
    w.EndObject();
  }
  w.EndArray();
  w.Key("text_offset");
  w.StartArray();
  size_t offset = lp.text_offset;
  for (const auto& t : *lp.tokens) {
    w.Uint64(offset);
    if (!tok.is_eog(t.token)) offset += raw_piece(tok, t.token).size();
  }
  w.EndArray();
  w.EndObject();
}

void tool_calls_array(Writer& w, const std::vector<ToolCall>& calls) {
  w.Key("tool_calls");
  w.StartArray();
  for (const ToolCall& c : calls) {
    w.StartObject();
    key_str(w, "id", c.id);
    key_str(w, "type", "function");
    w.Key("function");
    w.StartObject();
    key_str(w, "name", c.name);
    key_str(w, "arguments", c.arguments);
    w.EndObject();
    w.EndObject();
  }
  w.EndArray();
}

void tool_call_deltas(Writer& w, const std::vector<ToolCallDelta>& deltas) {
  w.Key("tool_calls");
  w.StartArray();
  for (const ToolCallDelta& d : deltas) {
    w.StartObject();
    w.Key("index");
    w.Uint64(d.index);
    if (!d.id.empty()) {
      key_str(w, "id", d.id);
      key_str(w, "type", "function");
    }
    w.Key("function");
    w.StartObject();
    if (!d.name.empty()) key_str(w, "name", d.name);
    key_str(w, "arguments", d.arguments);
    w.EndObject();
    w.EndObject();
  }
  w.EndArray();
}

// {"id", "object", "created", "model", "choices": [<choices>], "usage" (when given)}.
template <typename Choices>
std::string response(const ResponseMeta& meta, const char* object, const Usage* usage, Choices&& choices) {
  rapidjson::StringBuffer sb;
  Writer w(sb);
  w.StartObject();
  header(w, meta, object);
  w.Key("choices");
  w.StartArray();
  choices(w);
  w.EndArray();
  if (usage != nullptr) usage_object(w, *usage);
  w.EndObject();
  return std::string(sb.GetString(), sb.GetSize());
}

// A response with the one choice {"index": i, <body>, "finish_reason"}.
template <typename Body>
std::string one_choice_response(const ResponseMeta& meta, const char* object, const std::string& finish_reason,
                                const Usage* usage, Body&& body) {
  return response(meta, object, usage, [&](Writer& w) {
    w.StartObject();
    w.Key("index");
    w.Uint(meta.choice_index);
    body(w);
    finish_reason_field(w, finish_reason);
    w.EndObject();
  });
}

// The body of a legacy completions choice (whole response and stream chunk alike).
void completion_choice(Writer& w, const std::string& text, const LogprobsView& logprobs) {
  key_str(w, "text", text);
  completion_logprobs(w, logprobs);
}

}  // namespace

std::string chat_completion_json(const ResponseMeta& meta, const ParseResult& result, const std::string& finish_reason,
                                 const LogprobsView& logprobs, const Usage& usage) {
  return one_choice_response(meta, "chat.completion", finish_reason, &usage, [&](Writer& w) {
    w.Key("message");
    w.StartObject();
    key_str(w, "role", "assistant");
    w.Key("content");
    // OpenAI: content is null when the reply is only tool calls.
    if (result.content.empty() && !result.tool_calls.empty()) {
      w.Null();
    } else {
      str(w, result.content);
    }
    if (!result.reasoning_content.empty()) key_str(w, "reasoning_content", result.reasoning_content);
    if (!result.tool_calls.empty()) tool_calls_array(w, result.tool_calls);
    w.EndObject();
    chat_logprobs(w, logprobs);
  });
}

std::string chat_chunk_json(const ResponseMeta& meta, const ParseDelta& delta, bool with_role,
                            const LogprobsView& logprobs, const std::string& finish_reason) {
  return one_choice_response(meta, "chat.completion.chunk", finish_reason, nullptr, [&](Writer& w) {
    w.Key("delta");
    w.StartObject();
    if (with_role) {
      key_str(w, "role", "assistant");
      if (delta.content.empty()) key_str(w, "content", "");
    }
    if (!delta.reasoning.empty()) key_str(w, "reasoning_content", delta.reasoning);
    if (!delta.content.empty()) key_str(w, "content", delta.content);
    if (!delta.tool_calls.empty()) tool_call_deltas(w, delta.tool_calls);
    w.EndObject();
    chat_logprobs(w, logprobs);
  });
}

std::string completion_json(const ResponseMeta& meta, const std::string& text, const std::string& finish_reason,
                            const LogprobsView& logprobs, const Usage& usage) {
  return one_choice_response(meta, "text_completion", finish_reason, &usage,
                             [&](Writer& w) { completion_choice(w, text, logprobs); });
}

std::string completion_chunk_json(const ResponseMeta& meta, const std::string& text, const LogprobsView& logprobs,
                                  const std::string& finish_reason) {
  return one_choice_response(meta, "text_completion", finish_reason, nullptr,
                             [&](Writer& w) { completion_choice(w, text, logprobs); });
}

std::string usage_chunk_json(const ResponseMeta& meta, const char* object, const Usage& usage) {
  return response(meta, object, &usage, [](Writer&) {});
}

std::string sanitize_utf8(std::string_view s) {
  return utf8::sanitize(s, utf8::Replace::kEachByte);
}

}  // namespace ds::openai
