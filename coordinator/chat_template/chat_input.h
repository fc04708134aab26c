// OpenAI /v1/chat/completions request -> ChatRequestInput, with validation and thinking control.
//
// Thinking resolution (first that applies wins):
//   1. `chat_template_kwargs.enable_thinking` (bool) at the top level of the request, else
//      inside `extra_body.chat_template_kwargs` — an explicit setting always wins;
//   2. the last `/think` or `/no_think` directive in any system or user message text
//      (messages in order, positions within a message in order);
//   3. unset: the template's default (Qwen3.5 thinks).
// Directives are stripped from every system/user message, not only the last one, so an
// earlier turn renders identically on every request (prefix caching stays valid).
#pragma once

#include <rapidjson/document.h>

#include <optional>
#include <string>

#include "coordinator/chat_template/chat_template.h"

namespace ds {

// Validates and converts the parsed request body. Throws ds::RequestError with a message
// fit for an OpenAI 400 invalid_request_error ("messages[1].role must be one of ...").
// - content: string, null (assistant only), or an array of parts {type:"text",text} /
//   {type:"image_url",image_url:{url}}; text-only arrays are concatenated into a string,
//   arrays with images are kept for the template's vision placeholders (urls are also
//   collected in image_urls).
// - role "developer" is treated as "system"; `reasoning` is accepted for `reasoning_content`.
// - tool_calls[].function.arguments given as a JSON string is parsed into an object (the
//   template iterates argument items); "" is {}; a string that is not a JSON object is refused.
// - add_generation_prompt: optional top-level bool, default true.
ChatRequestInput chat_input_from_request(const rapidjson::Value& request);

// Removes `/think` and `/no_think` (as whole words) from `text`, each with one adjacent space or
// newline (the following one if any, else the preceding one). Returns the last directive:
// true for /think, false for /no_think, nullopt when there was none.
std::optional<bool> strip_thinking_directives(std::string& text);

}  // namespace ds
