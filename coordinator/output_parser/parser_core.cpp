#include "coordinator/output_parser/parser_core.h"

#include <utility>

namespace ds {

ParserCore::ParserCore(OutputParserOptions options) : options_(std::move(options)) {
  if (!options_.make_call_id) options_.make_call_id = random_tool_call_id;
  mode_ = origin_ = options_.thinking_open ? Mode::kReasoning : Mode::kContent;
  reasoning_seen_ = options_.thinking_open;
}

void ParserCore::feed(std::string_view text, ParseDelta& out) {
  if (finished_) return;
  try {
    if (failed_) {
      content_.push(text, delta_.content);
    } else {
      in_.append(text);
      run(false);
      in_.erase(0, pos_);  // once per chunk keeps consumption linear overall
      pos_ = 0;
    }
  } catch (...) {
    // Only allocation failure can get here. Keep serving: the rest passes through as text.
    failed_ = true;
    in_.clear();
    pos_ = 0;
  }
  commit(out);
}

void ParserCore::finish(ParseDelta& out) {
  if (finished_) return;
  finished_ = true;
  try {
    if (!failed_) run(true);
    reasoning_.finish(delta_.reasoning);
    content_.finish(delta_.content);
  } catch (...) {
    failed_ = true;
  }
  commit(out);
}

void ParserCore::run(bool final) {
  while (step(final)) {
  }
}

bool ParserCore::step(bool final) {
  switch (mode_) {
    case Mode::kReasoning:
    case Mode::kContent:
      return step_text(final);
    case Mode::kToolOpen:
      return step_tool_open(final);
    case Mode::kFunctionName:
      return step_function_name(final);
    case Mode::kFunctionBody:
      return step_function_body(final);
    case Mode::kParamName:
      return step_param_name(final);
    case Mode::kParamValueStart:
      return step_param_value_start(final);
    case Mode::kParamValue:
      return step_param_value(final);
    case Mode::kAfterFunction:
      return step_after_function(final);
    case Mode::kJsonBody:
      return step_json_body(final);
  }
  return false;
}

void ParserCore::commit(ParseDelta& out) {
  result_.reasoning_content += delta_.reasoning;
  result_.content += delta_.content;
  out = std::move(delta_);
  delta_ = ParseDelta{};
}

}  // namespace ds
