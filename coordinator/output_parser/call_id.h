// Tool-call ids in the OpenAI style: "call_" followed by 24 random alphanumerics.
#pragma once

#include <functional>
#include <string>

namespace ds {

using ToolCallIdGenerator = std::function<std::string()>;

// A fresh random id. Uniqueness is probabilistic (62^24), which is what clients expect.
std::string random_tool_call_id();

}  // namespace ds
