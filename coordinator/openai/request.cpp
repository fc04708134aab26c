#include "coordinator/openai/request.h"

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <limits>

#include "coordinator/http/api_error.h"
#include "coordinator/openai/json_fields.h"

namespace ds::openai {

namespace {

// The legacy completions API's default (OpenAI and vLLM agree).
constexpr uint32_t kCompletionsDefaultMaxTokens = 16;
constexpr int64_t kMaxTokensCap = std::numeric_limits<int32_t>::max();

[[noreturn]] void bad(const std::string& param, const std::string& message) {
  throw ApiError(400, message, param);
}

// Fields whose non-default values ask for something we do not do: refuse clearly rather
// than silently ignoring them.
void reject_unsupported(const rapidjson::Value& req) {
  if (auto b = get_int(req, "best_of", 1, 128); b && *b != 1) bad("best_of", "Only best_of=1 is supported");
}

// min_p, the penalties, logit_bias, min_tokens and stop_token_ids.
void parse_logit_controls(const rapidjson::Value& req, SamplingParams& s) {
  s.min_p = static_cast<float>(get_number(req, "min_p", 0.0, 1.0).value_or(0.0));
  if (auto r = get_number(req, "repetition_penalty", 0.0, 1e9)) {
    if (*r <= 0.0) bad("repetition_penalty", "'repetition_penalty' must be greater than 0");
    s.repetition_penalty = static_cast<float>(*r);
  }
  s.frequency_penalty = static_cast<float>(get_number(req, "frequency_penalty", -2.0, 2.0).value_or(0.0));
  s.presence_penalty = static_cast<float>(get_number(req, "presence_penalty", -2.0, 2.0).value_or(0.0));
  s.logit_bias = get_token_map(req, "logit_bias", -100.0, 100.0);
  s.min_tokens = static_cast<uint32_t>(get_int(req, "min_tokens", 0, kMaxTokensCap).value_or(0));
  for (const int64_t id :
       get_int_array(req, "stop_token_ids", 0, std::numeric_limits<int32_t>::max(), kMaxStopTokenIds)) {
    s.stop_token_ids.push_back(static_cast<int32_t>(id));
  }
}

void parse_common(const rapidjson::Value& req, CommonParams& p) {
  reject_unsupported(req);
  p.model = get_string(req, "model").value_or("");
  p.n = static_cast<uint32_t>(get_int(req, "n", 1, kMaxChoices).value_or(1));
  p.stream = get_bool(req, "stream").value_or(false);
  if (const auto* so = get_object(req, "stream_options")) {
    p.include_usage = get_bool(*so, "include_usage").value_or(false);
  }
  SamplingParams& s = p.sampling;
  s.temperature = static_cast<float>(get_number(req, "temperature", 0.0, 2.0).value_or(1.0));
  const double top_p = get_number(req, "top_p", 0.0, 1.0).value_or(1.0);
  if (top_p <= 0.0) bad("top_p", "'top_p' must be in (0, 1]");
  s.top_p = static_cast<float>(top_p);
  // vLLM's convention: -1 (or 0) disables top-k.
  const int64_t top_k = get_int(req, "top_k", -1, std::numeric_limits<int32_t>::max()).value_or(0);
  s.top_k = top_k < 0 ? 0 : static_cast<int32_t>(top_k);
  if (auto seed = get_int(req, "seed", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max())) {
    s.seed = static_cast<uint64_t>(*seed);
  }
  s.ignore_eos = get_bool(req, "ignore_eos").value_or(false);
  parse_logit_controls(req, s);
  p.stop = get_stop(req, "stop", kMaxStopStrings);
}

// `min_tokens`: 0 for completions with echo (only the prompt comes back, as OpenAI's legacy API).
void parse_max_tokens(const rapidjson::Value& req, CommonParams& p, bool chat, int64_t min_tokens = 1) {
  std::optional<int64_t> m;
  if (chat) m = get_int(req, "max_completion_tokens", 1, kMaxTokensCap);
  if (!m) m = get_int(req, "max_tokens", min_tokens, kMaxTokensCap);
  if (m) p.max_tokens = static_cast<uint32_t>(*m);
  if (p.max_tokens && p.sampling.min_tokens > *p.max_tokens) {
    bad("min_tokens", "'min_tokens' (" + std::to_string(p.sampling.min_tokens) + ") must not exceed " +
                          (chat ? "max_completion_tokens / max_tokens" : "max_tokens") + " (" +
                          std::to_string(*p.max_tokens) + ")");
  }
}

// reasoning_effort → thinking on or off, unless chat_template_kwargs.enable_thinking (top level
// or in extra_body) says so explicitly.
std::optional<bool> parse_reasoning_effort(const rapidjson::Value& req) {
  const std::optional<std::string> effort = get_string(req, "reasoning_effort");
  if (!effort) return std::nullopt;
  bool on = false;
  if (*effort == "none" || *effort == "minimal") {
    on = false;
  } else if (*effort == "low" || *effort == "medium" || *effort == "high") {
    on = true;
  } else {
    bad("reasoning_effort", "'reasoning_effort' must be 'none', 'minimal', 'low', 'medium' or 'high'");
  }
  const auto explicit_thinking = [](const rapidjson::Value& obj) {
    const rapidjson::Value* k = field(obj, "chat_template_kwargs");
    return k != nullptr && k->IsObject() && field(*k, "enable_thinking") != nullptr;
  };
  if (explicit_thinking(req)) return std::nullopt;
  if (const rapidjson::Value* extra = field(req, "extra_body"); extra != nullptr && extra->IsObject()) {
    if (explicit_thinking(*extra)) return std::nullopt;
  }
  return on;
}

void parse_tools(const rapidjson::Value& req, ChatParams& p) {
  const rapidjson::Value* tools = field(req, "tools");
  if (tools != nullptr) {
    if (!tools->IsArray()) bad("tools", "'tools' must be an array");
    for (rapidjson::SizeType i = 0; i < tools->Size(); ++i) {
      const rapidjson::Value& t = (*tools)[i];
      const std::string where = "tools[" + std::to_string(i) + "]";
      if (!t.IsObject()) bad("tools", where + " must be an object");
      if (get_string(t, "type").value_or("function") != "function") bad("tools", where + ".type must be 'function'");
      const rapidjson::Value* fn = field(t, "function");
      if (fn == nullptr || !fn->IsObject()) bad("tools", where + ".function must be an object");
      const auto name = field(*fn, "name");
      if (name == nullptr || !name->IsString() || name->GetStringLength() == 0) {
        bad("tools", where + ".function.name must be a non-empty string");
      }
      const auto params = field(*fn, "parameters");
      if (params != nullptr && !params->IsObject()) bad("tools", where + ".function.parameters must be an object");
    }
    p.has_tools = tools->Size() > 0;
    p.tools = ToolSchemas::from_value(*tools);
  }
  const rapidjson::Value* tc = field(req, "tool_choice");
  if (tc == nullptr) {
    p.tool_choice = p.has_tools ? ToolChoice::kAuto : ToolChoice::kNone;
    return;
  }
  if (tc->IsString()) {
    const std::string s = to_string(*tc);
    if (s == "none") {
      p.tool_choice = ToolChoice::kNone;
    } else if (s == "auto") {
      p.tool_choice = p.has_tools ? ToolChoice::kAuto : ToolChoice::kNone;
    } else if (s == "required") {
      p.tool_choice = ToolChoice::kRequired;
    } else {
      bad("tool_choice", "'tool_choice' must be 'none', 'auto', 'required' or a function choice");
    }
  } else if (tc->IsObject()) {
    const rapidjson::Value* fn = field(*tc, "function");
    const rapidjson::Value* name = fn != nullptr && fn->IsObject() ? field(*fn, "name") : nullptr;
    if (name == nullptr || !name->IsString()) bad("tool_choice", "tool_choice.function.name must be a string");
    p.tool_choice = ToolChoice::kFunction;
    p.tool_choice_name = to_string(*name);
    if (!p.tools.has_tool(p.tool_choice_name)) {
      bad("tool_choice", "tool_choice names function '" + p.tool_choice_name + "', which is not in 'tools'");
    }
  } else {
    bad("tool_choice", "'tool_choice' must be a string or an object");
  }
  if ((p.tool_choice == ToolChoice::kRequired || p.tool_choice == ToolChoice::kFunction) && !p.has_tools) {
    bad("tool_choice", "tool_choice requires 'tools'");
  }
}

// tool_choice "required" or a named function: the output is a tool call (structured_request.h).
void constrain_tool_calls(const rapidjson::Value& req, ChatParams& p) {
  if (p.tool_choice != ToolChoice::kRequired && p.tool_choice != ToolChoice::kFunction) return;
  if (p.structured.active()) {
    bad("tool_choice", "tool_choice '" + std::string(p.tool_choice == ToolChoice::kRequired ? "required" : "function") +
                           "' conflicts with '" + p.structured.param + "': ask for one output constraint");
  }
  rapidjson::StringBuffer buf;
  rapidjson::Writer<rapidjson::StringBuffer> w(buf);
  field(req, "tools")->Accept(w);
  p.structured.kind = StructuredSpec::Kind::kToolCalls;
  p.structured.param = "tool_choice";
  p.structured.text.assign(buf.GetString(), buf.GetSize());
  if (p.tool_choice == ToolChoice::kFunction) p.structured.tool_names = {p.tool_choice_name};
  p.structured.parallel_tool_calls = p.parallel_tool_calls;
}

std::vector<int32_t> parse_id_array(const rapidjson::Value& arr) {
  std::vector<int32_t> ids;
  ids.reserve(arr.Size());
  for (const auto& v : arr.GetArray()) {
    if (!v.IsInt()) bad("prompt", "token ids in 'prompt' must be integers");
    ids.push_back(v.GetInt());
  }
  return ids;
}

void parse_prompt(const rapidjson::Value& req, CompletionParams& p) {
  const rapidjson::Value* prompt = field(req, "prompt");
  if (prompt == nullptr) bad("prompt", "'prompt' is required");
  if (prompt->IsString()) {
    p.prompt_text = to_string(*prompt);
    return;
  }
  if (!prompt->IsArray()) bad("prompt", "'prompt' must be a string, an array of strings, or token ids");
  if (prompt->Empty()) bad("prompt", "'prompt' must not be empty");
  const rapidjson::Value& first = (*prompt)[0];
  if (first.IsNumber()) {
    p.prompt_ids = parse_id_array(*prompt);
    return;
  }
  // A batch of prompts (strings or id arrays): only a batch of one is served.
  if (prompt->Size() > 1) bad("prompt", "Batches of several prompts are not supported; send one prompt per request");
  if (first.IsString()) {
    p.prompt_text = to_string(first);
  } else if (first.IsArray()) {
    p.prompt_ids = parse_id_array(first);
  } else {
    bad("prompt", "'prompt' must be a string, an array of strings, or token ids");
  }
  if (!p.prompt_text && p.prompt_ids.empty()) bad("prompt", "'prompt' must not be empty");
}

}  // namespace

void merge_extra_body(rapidjson::Document& doc) {
  auto it = doc.FindMember("extra_body");
  if (it == doc.MemberEnd() || !it->value.IsObject()) return;
  rapidjson::Value extra(it->value, doc.GetAllocator());
  for (auto& m : extra.GetObject()) {
    if (doc.HasMember(m.name)) continue;
    doc.AddMember(rapidjson::Value(m.name, doc.GetAllocator()), rapidjson::Value(m.value, doc.GetAllocator()),
                  doc.GetAllocator());
  }
}

ChatParams parse_chat_params(const rapidjson::Value& req) {
  ChatParams p;
  const rapidjson::Value* messages = field(req, "messages");
  if (messages == nullptr || !messages->IsArray() || messages->Empty()) {
    bad("messages", "'messages' must be a non-empty array");
  }
  parse_common(req, p);
  parse_max_tokens(req, p, /*chat=*/true);
  p.sampling.logprobs = get_bool(req, "logprobs").value_or(false);
  p.sampling.top_logprobs = static_cast<uint32_t>(get_int(req, "top_logprobs", 0, kMaxTopLogprobs).value_or(0));
  if (p.sampling.top_logprobs > 0 && !p.sampling.logprobs) {
    bad("top_logprobs", "'top_logprobs' requires 'logprobs': true");
  }
  p.structured = parse_structured_spec(req);
  parse_tools(req, p);
  p.parallel_tool_calls = get_bool(req, "parallel_tool_calls").value_or(true);
  constrain_tool_calls(req, p);
  p.enable_thinking = parse_reasoning_effort(req);
  if (const rapidjson::Value* k = field(req, "chat_template_kwargs"); k != nullptr && !k->IsObject()) {
    bad("chat_template_kwargs", "'chat_template_kwargs' must be an object");
  }
  return p;
}

CompletionParams parse_completion_params(const rapidjson::Value& req) {
  CompletionParams p;
  parse_prompt(req, p);
  parse_common(req, p);
  p.echo = get_bool(req, "echo").value_or(false);
  p.structured = parse_structured_spec(req);
  parse_max_tokens(req, p, /*chat=*/false, p.echo ? 0 : 1);
  if (!p.max_tokens) p.max_tokens = kCompletionsDefaultMaxTokens;
  if (auto lp = get_int(req, "logprobs", 0, kMaxTopLogprobs)) {
    p.sampling.logprobs = true;
    p.sampling.top_logprobs = static_cast<uint32_t>(*lp);
  }
  // echo with logprobs: the prompt tokens' logprobs precede the completion's.
  p.sampling.prompt_logprobs = p.echo && p.sampling.logprobs;
  if (auto suffix = get_string(req, "suffix"); suffix && !suffix->empty()) bad("suffix", "'suffix' is not supported");
  return p;
}

void check_token_ids(const SamplingParams& s, int32_t n_vocab) {
  const auto check = [n_vocab](int32_t id, const char* param) {
    if (id < 0 || id >= n_vocab) {
      bad(param, "Token id " + std::to_string(id) + " in '" + param + "' is outside the vocabulary [0, " +
                     std::to_string(n_vocab) + ")");
    }
  };
  for (const auto& [id, bias] : s.logit_bias) check(id, "logit_bias");
  for (const int32_t id : s.stop_token_ids) check(id, "stop_token_ids");
}

}  // namespace ds::openai
