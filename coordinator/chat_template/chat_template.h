// Chat template engine: renders a GGUF `tokenizer.chat_template` (a Jinja subset) into a
// PromptText whose request-derived bytes are marked untrusted (see prompt_text.h).
//
// Context given to the template mirrors transformers' apply_chat_template: `messages`,
// `tools` (none when the request has none), `add_generation_prompt`, `enable_thinking` (only
// when resolved), extra chat_template_kwargs, `bos_token`/`eos_token`, and the functions
// raise_exception, namespace, range, dict, strftime_now.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "coordinator/chat_template/errors.h"
#include "coordinator/chat_template/limits.h"
#include "coordinator/chat_template/value.h"
#include "coordinator/prompt_text.h"

namespace ds {

class GgufFile;
namespace jinja {
struct Program;
}

// Everything a render needs from a chat request. Build it with chat_input_from_request()
// (chat_input.h) or by hand (tests). All strings taken from the request are untrusted Texts.
struct ChatRequestInput {
  jinja::Value messages = jinja::Value::list();  // list of OpenAI message dicts
  std::optional<jinja::Value> tools;             // the request's `tools` array, when given
  bool add_generation_prompt = true;
  std::optional<bool> enable_thinking;                             // nullopt: the template's default (thinking on)
  std::vector<std::pair<std::string, jinja::Value>> extra_kwargs;  // other chat_template_kwargs
  std::vector<std::string> image_urls;                             // image parts in order of appearance
};

class ChatTemplate {
 public:
  // The GGUF's tokenizer.chat_template, or builtin_template() when the key is absent; also
  // picks up bos/eos token strings. Throws ds::TemplateError when the template does not parse.
  static ChatTemplate from_gguf(const GgufFile& gguf, const jinja::Limits& limits = {});
  static ChatTemplate from_source(const std::string& source, const jinja::Limits& limits = {});
  // deltaserve's own ChatML template with the Qwen3.5 layout (qwen35-model-spec.md §9).
  static ChatTemplate builtin(const jinja::Limits& limits = {});

  // Throws ds::TemplateRaise (template rejected the conversation: HTTP 400) or
  // ds::TemplateError (evaluation error / limit exceeded). Thread-safe (const).
  PromptText render(const ChatRequestInput& input) const;

  const std::string& source() const { return source_; }
  bool is_builtin() const { return is_builtin_; }
  void set_special_tokens(std::string bos, std::string eos) {
    bos_token_ = std::move(bos);
    eos_token_ = std::move(eos);
  }

 private:
  ChatTemplate() = default;

  std::shared_ptr<const jinja::Program> program_;
  std::string source_;
  jinja::Limits limits_;
  std::string bos_token_;
  std::string eos_token_;
  bool is_builtin_ = false;
};

}  // namespace ds
