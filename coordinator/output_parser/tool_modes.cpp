// Tool-call markup. Every byte consumed while inside a call is also kept in raw_, so a call
// that turns out malformed can be handed back as the text it was.
#include <algorithm>
#include <string_view>
#include <utility>

#include "coordinator/output_parser/parser_core.h"
#include "coordinator/output_parser/text_scan.h"

namespace ds {
namespace {

constexpr size_t kMaxTag = OutputParser::kMaxTagBytes;
constexpr std::string_view kFunctionOpen = "<function=";
constexpr std::string_view kFunctionClose = "</function>";
constexpr std::string_view kParamOpen = "<parameter=";
constexpr std::string_view kParamClose = "</parameter>";
constexpr std::string_view kToolCallClose = "</tool_call>";

}  // namespace

void ParserCore::begin_call_text(std::string_view opener, Mode next) {
  origin_ = mode_;
  raw_.assign(opener);
  name_.clear();
  gap_ = 0;
  mode_ = next;
}

void ParserCore::consume_raw(size_t n) {
  raw_.append(in_, pos_, n);
  pos_ += n;
}

// Consumes whitespace into `sink`, never letting the run since the last markup item exceed
// kMaxTag: an endless run must not keep a call (and its raw text) open.
bool ParserCore::skip_gap(std::string& sink) {
  const size_t n = std::min(count_whitespace(rest()), kMaxTag - gap_);
  if (n == 0) return false;
  sink.append(in_, pos_, n);
  pos_ += n;
  gap_ += n;
  return true;
}

bool ParserCore::step_tool_open(bool final) {
  if (gap_ >= kMaxTag) return abort_call();
  if (skip_gap(raw_)) return true;
  const std::string_view r = rest();
  if (r.empty()) return final && abort_call();
  if (r[0] == '{') {  // the older Qwen3 JSON form
    value_.clear();
    mode_ = Mode::kJsonBody;
    return true;
  }
  const TagMatch m = match_tag(r, kFunctionOpen);
  if (m == TagMatch::kFull) {
    consume_raw(kFunctionOpen.size());
    name_.clear();
    mode_ = Mode::kFunctionName;
    return true;
  }
  if (m == TagMatch::kPartial && !final) return false;
  abort_call();
  return true;
}

// Reads a function or parameter name up to '>'. Names are single-line, '<'-free, non-empty
// and at most kMaxTag bytes; anything else means this was not markup after all.
ParserCore::NameStep ParserCore::step_name(bool final) {
  const std::string_view r = rest();
  for (size_t i = 0; i < r.size(); ++i) {
    const char c = r[i];
    const bool closes = c == '>' && name_.size() + i > 0;
    if (closes) {
      name_.append(r.substr(0, i));
      consume_raw(i + 1);
      return NameStep::kDone;
    }
    if (c == '>' || c == '\n' || c == '<' || name_.size() + i >= kMaxTag) {
      name_.append(r.substr(0, i));
      consume_raw(i);
      abort_call();
      return NameStep::kProgress;
    }
  }
  name_.append(r);
  consume_raw(r.size());
  if (final) {
    abort_call();
    return NameStep::kProgress;
  }
  return r.empty() ? NameStep::kNeedMore : NameStep::kProgress;
}

bool ParserCore::step_function_name(bool final) {
  const NameStep s = step_name(final);
  if (s == NameStep::kDone) {
    start_call(std::move(name_));
    name_.clear();
    gap_ = 0;
    mode_ = Mode::kFunctionBody;
  }
  return s != NameStep::kNeedMore;
}

bool ParserCore::step_param_name(bool final) {
  const NameStep s = step_name(final);
  if (s == NameStep::kDone) {
    param_ = std::move(name_);
    name_.clear();
    mode_ = Mode::kParamValueStart;
  }
  return s != NameStep::kNeedMore;
}

bool ParserCore::step_function_body(bool final) {
  if (gap_ >= kMaxTag) return abort_call();
  if (skip_gap(raw_)) return true;
  const std::string_view r = rest();
  if (r.empty()) return final && abort_call();
  bool partial = false;
  for (std::string_view tag : {kParamOpen, kFunctionClose, kToolCallClose}) {
    const TagMatch m = match_tag(r, tag);
    partial = partial || m == TagMatch::kPartial;
    if (m != TagMatch::kFull) continue;
    consume_raw(tag.size());
    gap_ = 0;
    if (tag == kParamOpen) {
      name_.clear();
      mode_ = Mode::kParamName;
    } else {
      // </tool_call> without </function> is accepted: the intent is unambiguous.
      close_xml_call();
      pending_space_.clear();
      mode_ = tag == kFunctionClose ? Mode::kAfterFunction : Mode::kContent;
    }
    return true;
  }
  if (partial && !final) return false;
  abort_call();
  return true;
}

bool ParserCore::step_param_value_start(bool final) {
  const std::string_view r = rest();
  if (r.empty() && !final) return false;
  if (!r.empty() && r[0] == '\n') consume_raw(1);  // the newline after <parameter=P> is markup
  value_.clear();
  mode_ = Mode::kParamValue;
  return true;
}

bool ParserCore::step_param_value(bool final) {
  const std::string_view r = rest();
  const size_t at = r.find(kParamClose);
  if (at != std::string_view::npos) {
    value_.append(r.substr(0, at));
    consume_raw(at + kParamClose.size());
    finish_param();
    gap_ = 0;
    mode_ = Mode::kFunctionBody;
    return true;
  }
  if (final) {
    consume_raw(r.size());
    return abort_call();
  }
  // Values are data of any length; only a possible start of </parameter> is held back.
  const size_t n = r.size() - tag_prefix_suffix(r, kParamClose);
  if (n == 0) return false;
  value_.append(r.substr(0, n));
  consume_raw(n);
  return true;
}

bool ParserCore::step_after_function(bool final) {
  const auto to_content = [&] {
    mode_ = Mode::kContent;
    push_text(pending_space_);  // it was plain text after all
    pending_space_.clear();
    return true;
  };
  if (gap_ >= kMaxTag) return to_content();
  if (skip_gap(pending_space_)) return true;
  const std::string_view r = rest();
  if (r.empty()) return final ? to_content() : false;
  bool partial = false;
  for (std::string_view tag : {kToolCallClose, kFunctionOpen}) {
    const TagMatch m = match_tag(r, tag);
    partial = partial || m == TagMatch::kPartial;
    if (m != TagMatch::kFull) continue;
    pos_ += tag.size();
    pending_space_.clear();
    if (tag == kToolCallClose) {
      mode_ = Mode::kContent;
    } else {  // several calls in one <tool_call> block
      raw_.assign(kFunctionOpen);
      name_.clear();
      gap_ = 0;
      mode_ = Mode::kFunctionName;
    }
    return true;
  }
  if (partial && !final) return false;
  return to_content();
}

}  // namespace ds
