#include "coordinator/openai/response_json.h"

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

namespace ds::openai {

namespace {

using Writer = rapidjson::Writer<rapidjson::StringBuffer>;

void str(Writer& w, std::string_view s) { w.String(s.data(), static_cast<rapidjson::SizeType>(s.size())); }

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
  w.Key("token_logprobs");
  w.StartArray();
  for (const auto& t : *lp.tokens) w.Double(t.logprob);
  w.EndArray();
  w.Key("top_logprobs");
  w.StartArray();
  for (const auto& t : *lp.tokens) {
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

std::string done(const rapidjson::StringBuffer& sb) { return std::string(sb.GetString(), sb.GetSize()); }

}  // namespace

std::string chat_completion_json(const ResponseMeta& meta, const ParseResult& result,
                                 const std::string& finish_reason, const LogprobsView& logprobs,
                                 const Usage& usage) {
  rapidjson::StringBuffer sb;
  Writer w(sb);
  w.StartObject();
  header(w, meta, "chat.completion");
  w.Key("choices");
  w.StartArray();
  w.StartObject();
  w.Key("index");
  w.Uint(0);
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
  finish_reason_field(w, finish_reason);
  w.EndObject();
  w.EndArray();
  usage_object(w, usage);
  w.EndObject();
  return done(sb);
}

std::string chat_chunk_json(const ResponseMeta& meta, const ParseDelta& delta, bool with_role,
                            const LogprobsView& logprobs, const std::string& finish_reason) {
  rapidjson::StringBuffer sb;
  Writer w(sb);
  w.StartObject();
  header(w, meta, "chat.completion.chunk");
  w.Key("choices");
  w.StartArray();
  w.StartObject();
  w.Key("index");
  w.Uint(0);
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
  finish_reason_field(w, finish_reason);
  w.EndObject();
  w.EndArray();
  w.EndObject();
  return done(sb);
}

std::string completion_json(const ResponseMeta& meta, const std::string& text,
                            const std::string& finish_reason, const LogprobsView& logprobs,
                            const Usage& usage) {
  rapidjson::StringBuffer sb;
  Writer w(sb);
  w.StartObject();
  header(w, meta, "text_completion");
  w.Key("choices");
  w.StartArray();
  w.StartObject();
  w.Key("index");
  w.Uint(0);
  key_str(w, "text", text);
  completion_logprobs(w, logprobs);
  finish_reason_field(w, finish_reason);
  w.EndObject();
  w.EndArray();
  usage_object(w, usage);
  w.EndObject();
  return done(sb);
}

std::string completion_chunk_json(const ResponseMeta& meta, const std::string& text,
                                  const LogprobsView& logprobs, const std::string& finish_reason) {
  rapidjson::StringBuffer sb;
  Writer w(sb);
  w.StartObject();
  header(w, meta, "text_completion");
  w.Key("choices");
  w.StartArray();
  w.StartObject();
  w.Key("index");
  w.Uint(0);
  key_str(w, "text", text);
  completion_logprobs(w, logprobs);
  finish_reason_field(w, finish_reason);
  w.EndObject();
  w.EndArray();
  w.EndObject();
  return done(sb);
}

std::string usage_chunk_json(const ResponseMeta& meta, const char* object, const Usage& usage) {
  rapidjson::StringBuffer sb;
  Writer w(sb);
  w.StartObject();
  header(w, meta, object);
  w.Key("choices");
  w.StartArray();
  w.EndArray();
  usage_object(w, usage);
  w.EndObject();
  return done(sb);
}

std::string sanitize_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    bool ok = len > 0 && i + len <= s.size() && !(len == 2 && c < 0xC2) && !(len == 4 && c > 0xF4);
    for (size_t k = 1; ok && k < len; ++k) ok = (static_cast<unsigned char>(s[i + k]) & 0xC0) == 0x80;
    if (ok && len == 3) {
      const auto c1 = static_cast<unsigned char>(s[i + 1]);
      ok = !(c == 0xE0 && c1 < 0xA0) && !(c == 0xED && c1 >= 0xA0);  // overlong / surrogate
    }
    if (ok && len == 4) {
      const auto c1 = static_cast<unsigned char>(s[i + 1]);
      ok = !(c == 0xF0 && c1 < 0x90) && !(c == 0xF4 && c1 >= 0x90);
    }
    if (ok) {
      out.append(s.substr(i, len));
      i += len;
    } else {
      out.append("\xEF\xBF\xBD");
      ++i;
    }
  }
  return out;
}

}  // namespace ds::openai
