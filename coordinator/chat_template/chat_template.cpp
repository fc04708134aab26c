#include "coordinator/chat_template/chat_template.h"

#include "common/gguf.h"
#include "coordinator/chat_template/builtin_template.h"
#include "coordinator/chat_template/builtins.h"
#include "coordinator/chat_template/evaluator.h"
#include "coordinator/chat_template/parser.h"

namespace ds {
namespace {

std::string token_string(const GgufFile& gguf, const char* id_key) {
  const GgufValue* id = gguf.find(id_key);
  if (id == nullptr || !id->is_integer() || !gguf.has("tokenizer.ggml.tokens")) return "";
  const auto& tokens = gguf.get_string_array("tokenizer.ggml.tokens");
  const uint64_t i = gguf.get_u64(id_key);
  return i < tokens.size() ? std::string(tokens[i]) : std::string();
}

}  // namespace

ChatTemplate ChatTemplate::from_source(const std::string& source, const jinja::Limits& limits) {
  ChatTemplate t;
  t.program_ = jinja::parse_template(source, limits.max_nesting);
  t.source_ = source;
  t.limits_ = limits;
  return t;
}

ChatTemplate ChatTemplate::builtin(const jinja::Limits& limits) {
  ChatTemplate t = from_source(builtin_template_source(), limits);
  t.is_builtin_ = true;
  t.eos_token_ = "<|im_end|>";
  return t;
}

ChatTemplate ChatTemplate::from_gguf(const GgufFile& gguf, const jinja::Limits& limits) {
  const GgufValue* v = gguf.find("tokenizer.chat_template");
  ChatTemplate t =
      v != nullptr && v->type == GgufType::STRING ? from_source(std::string(v->str), limits) : builtin(limits);
  std::string bos = token_string(gguf, "tokenizer.ggml.bos_token_id");
  std::string eos = token_string(gguf, "tokenizer.ggml.eos_token_id");
  if (!eos.empty() || !bos.empty()) t.set_special_tokens(std::move(bos), std::move(eos));
  return t;
}

PromptText ChatTemplate::render(const ChatRequestInput& input) const {
  using jinja::Value;
  std::vector<std::pair<std::string, Value>> ctx = jinja::global_functions(limits_);
  ctx.emplace_back("bos_token", Value::trusted(bos_token_));
  ctx.emplace_back("eos_token", Value::trusted(eos_token_));
  ctx.emplace_back("messages", input.messages);
  ctx.emplace_back("tools", input.tools ? *input.tools : Value::none());
  ctx.emplace_back("documents", Value::none());
  ctx.emplace_back("add_generation_prompt", Value::boolean(input.add_generation_prompt));
  if (input.enable_thinking) ctx.emplace_back("enable_thinking", Value::boolean(*input.enable_thinking));
  for (const auto& kv : input.extra_kwargs) ctx.push_back(kv);

  jinja::Evaluator ev(limits_);
  const jinja::Text text = ev.render(*program_, ctx);
  PromptText out;
  text.append_to(out);
  return out;
}

}  // namespace ds
