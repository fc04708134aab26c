// Tool-call bookkeeping shared by the XML and JSON forms: starting a call (its first
// streamed fragment), argument fragments, completion, and the fallback to text.
#include <string_view>
#include <utility>

#include "coordinator/output_parser/json_text.h"
#include "coordinator/output_parser/json_tool_call.h"
#include "coordinator/output_parser/param_value.h"
#include "coordinator/output_parser/parser_core.h"
#include "coordinator/output_parser/text_scan.h"

namespace ds {
namespace {

constexpr std::string_view kToolCallClose = "</tool_call>";

}  // namespace

bool ParserCore::step_json_body(bool final) {
  const std::string_view r = rest();
  const size_t at = r.find(kToolCallClose);
  if (at != std::string_view::npos) {
    value_.append(r.substr(0, at));
    consume_raw(at + kToolCallClose.size());
    auto call = parse_json_tool_call(value_);
    value_.clear();
    if (!call) return abort_call();
    start_call(std::move(call->name));
    emit_arguments(call->arguments);
    complete_call();
    mode_ = Mode::kContent;
    return true;
  }
  if (final) {
    consume_raw(r.size());
    return abort_call();
  }
  const size_t n = r.size() - tag_prefix_suffix(r, kToolCallClose);
  if (n == 0) return false;
  value_.append(r.substr(0, n));
  consume_raw(n);
  return true;
}

void ParserCore::start_call(std::string name) {
  n_params_ = 0;
  dropping_ = !options_.parallel_tool_calls && !result_.tool_calls.empty();
  if (dropping_) {  // takes neither an id nor a streaming index
    call_ = ToolCall{"", std::move(name), ""};
    return;
  }
  call_ = ToolCall{options_.make_call_id(), std::move(name), ""};
  call_index_ = next_index_++;
  delta_.tool_calls.push_back(ToolCallDelta{call_index_, call_.id, call_.name, ""});
}

void ParserCore::finish_param() {
  std::string_view value = value_;
  // The template writes "\nVALUE\n</parameter>": the last newline is markup, not value.
  if (!value.empty() && value.back() == '\n') {
    value.remove_suffix(1);
    if (!value.empty() && value.back() == '\r') value.remove_suffix(1);
  }
  std::string fragment = n_params_ == 0 ? "{" : ",";
  fragment += json_quote(param_);
  fragment += ':';
  fragment += convert_param_value(value, options_.tools.param_types(call_.name, param_));
  ++n_params_;
  value_.clear();
  emit_arguments(fragment);
}

void ParserCore::close_xml_call() {
  emit_arguments(n_params_ == 0 ? "{}" : "}");
  complete_call();
}

void ParserCore::complete_call() {
  if (!dropping_) result_.tool_calls.push_back(std::move(call_));
  dropping_ = false;
  call_ = ToolCall{};
  raw_.clear();
  if (origin_ == Mode::kReasoning) {  // <tool_call> before </think> ends reasoning
    reasoning_.finish(delta_.reasoning);
    reasoning_ended_by_call_ = true;
    origin_ = Mode::kContent;
  }
  content_.drop_held();  // whitespace between text and a call is template layout
}

void ParserCore::emit_arguments(std::string_view fragment) {
  call_.arguments.append(fragment);
  if (dropping_) return;
  if (!delta_.tool_calls.empty() && delta_.tool_calls.back().index == call_index_) {
    delta_.tool_calls.back().arguments.append(fragment);
    return;
  }
  delta_.tool_calls.push_back(ToolCallDelta{call_index_, "", "", std::string(fragment)});
}

bool ParserCore::abort_call() {
  // Not a tool call after all: the text goes back, verbatim, to where it came from.
  mode_ = origin_;
  call_ = ToolCall{};
  dropping_ = false;
  n_params_ = 0;
  name_.clear();
  value_.clear();
  const std::string raw = std::move(raw_);
  raw_.clear();
  push_text(raw);
  return true;
}

}  // namespace ds
