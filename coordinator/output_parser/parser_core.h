// Internal state machine behind OutputParser. Input accumulates in `in_`; each step()
// consumes a decided prefix from `pos_` or reports that it needs more bytes. Decisions
// depend only on the bytes seen (never on where chunks were split), which is what makes the
// output independent of the chunking.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "coordinator/output_parser/output_parser.h"
#include "coordinator/output_parser/text_channel.h"

namespace ds {

class ParserCore {
 public:
  explicit ParserCore(OutputParserOptions options);

  void feed(std::string_view text, ParseDelta& out);
  void finish(ParseDelta& out);
  const ParseResult& result() const { return result_; }

 private:
  enum class Mode {
    kReasoning,
    kContent,
    kToolOpen,         // after <tool_call>: whitespace, then <function= or a JSON body
    kFunctionName,     // after <function=, up to >
    kFunctionBody,     // between parameters: <parameter=, </function> or </tool_call>
    kParamName,        // after <parameter=, up to >
    kParamValueStart,  // right after <parameter=P>: one newline belongs to the markup
    kParamValue,       // up to </parameter>
    kAfterFunction,    // after </function>: </tool_call>, another <function=, or text
    kJsonBody,         // old form: JSON up to </tool_call>
  };
  enum class Tag { kThinkOpen, kThinkClose, kToolCallOpen, kFunctionOpen };

  // Driver (parser_core.cpp).
  void run(bool final);
  bool step(bool final);
  void commit(ParseDelta& out);
  std::string_view rest() const { return std::string_view(in_).substr(pos_); }

  // Reasoning / content text (text_modes.cpp).
  bool step_text(bool final);
  bool tag_active(Tag tag) const;
  void on_tag(Tag tag);
  void push_text(std::string_view text);
  TextChannel& channel(Mode text_mode) { return text_mode == Mode::kReasoning ? reasoning_ : content_; }
  std::string& channel_out(Mode text_mode) { return text_mode == Mode::kReasoning ? delta_.reasoning : delta_.content; }
  void end_reasoning();

  // Tool calls (tool_modes.cpp).
  void begin_call_text(std::string_view opener, Mode next);
  void consume_raw(size_t n);
  bool skip_gap(std::string& sink);
  bool step_tool_open(bool final);
  enum class NameStep { kNeedMore, kProgress, kDone };
  NameStep step_name(bool final);
  bool step_function_name(bool final);
  bool step_function_body(bool final);
  bool step_param_name(bool final);
  bool step_param_value_start(bool final);
  bool step_param_value(bool final);
  bool step_after_function(bool final);
  bool step_json_body(bool final);
  void start_call(std::string name);
  void finish_param();
  void close_xml_call();
  void complete_call();
  void emit_arguments(std::string_view fragment);
  bool abort_call();  // always true: a step that aborts has made progress

  OutputParserOptions options_;
  ParseResult result_;
  ParseDelta delta_;  // being built by the current feed()/finish()
  bool finished_ = false;
  bool failed_ = false;  // an internal error happened; input now passes through as content

  std::string in_;
  size_t pos_ = 0;
  Mode mode_;
  Mode origin_;  // text mode a tool call started from; its text resumes there on abort

  TextChannel reasoning_;
  TextChannel content_;
  bool reasoning_seen_ = false;           // a think block was open at some point
  bool reasoning_ended_by_call_ = false;  // a tool call closed reasoning before </think>

  // The tool call being parsed.
  std::string raw_;            // its text so far, returned as text if it turns out malformed
  std::string name_;           // function or parameter name being read
  std::string param_;          // current parameter name
  std::string value_;          // current parameter value, or the JSON body
  std::string pending_space_;  // whitespace after </function>, text unless markup follows
  size_t gap_ = 0;             // whitespace run since the last markup item
  ToolCall call_;
  size_t call_index_ = 0;  // streaming index of the current call
  size_t next_index_ = 0;
  size_t n_params_ = 0;    // parameters emitted for the current XML call
  bool dropping_ = false;  // the current call is parsed but not reported (parallel_tool_calls off)
};

}  // namespace ds
