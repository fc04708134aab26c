// deltaserve's own fallback chat template, used when a GGUF carries no tokenizer.chat_template.
#pragma once

#include <string>

namespace ds {

// Jinja source implementing the Qwen3.5 ChatML layout of qwen35-model-spec.md §9: system turn,
// user/assistant turns, reasoning kept only for the current agentic turn, XML tool calls,
// tool results grouped into one user turn, and the thinking generation prefix. The tool
// instructions are our own wording (real Qwen GGUFs always ship their template).
const std::string& builtin_template_source();

}  // namespace ds
