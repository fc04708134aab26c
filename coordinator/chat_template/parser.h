// Recursive-descent parser: tokens -> Program. Anything outside the supported Jinja subset
// fails here, at load time, with a "line:column" message (ds::TemplateError).
#pragma once

#include <memory>
#include <string>

#include "coordinator/chat_template/ast.h"

namespace ds::jinja {

// max_nesting bounds expression and block nesting, so hostile templates cannot overflow the
// parser's (or later the evaluator's) stack.
std::unique_ptr<Program> parse_template(const std::string& source, int max_nesting = 200);

}  // namespace ds::jinja
