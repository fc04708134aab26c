// Filters (`x|name(args)`), tests (`x is name(args)`) and global functions (raise_exception,
// namespace, range, dict, strftime_now). The parser rejects unknown filter/test names at load.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "coordinator/chat_template/limits.h"
#include "coordinator/chat_template/value.h"

namespace ds::jinja {

using FilterFn = Value (*)(const Value& operand, const CallArgs& args, const Limits& limits);
using TestFn = bool (*)(const Value& operand, const CallArgs& args);

FilterFn find_filter(std::string_view name);  // nullptr when unknown
TestFn find_test(std::string_view name);

// Functions every template sees in its global scope.
std::vector<std::pair<std::string, Value>> global_functions(const Limits& limits);

}  // namespace ds::jinja
