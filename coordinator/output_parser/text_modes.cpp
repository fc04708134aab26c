// Reasoning and content text: pass bytes through, stopping at anything that may be a tag.
#include <string_view>

#include "coordinator/output_parser/parser_core.h"
#include "coordinator/output_parser/text_scan.h"

namespace ds {
bool ParserCore::tag_active(Tag tag) const {
  const bool in_reasoning = mode_ == Mode::kReasoning;
  switch (tag) {
    case Tag::kThinkOpen:
      // Opens reasoning only at the very start of the output; inside reasoning a repeated
      // opener (the prompt already had one) is swallowed.
      if (in_reasoning) return !reasoning_.touched();
      return !reasoning_seen_ && !content_.touched() && next_index_ == 0;
    case Tag::kThinkClose:
      // After a tool call ended reasoning implicitly, a late </think> is markup, not text.
      return in_reasoning || (reasoning_ended_by_call_ && !content_.touched());
    case Tag::kToolCallOpen:
      return options_.tools_enabled;
    case Tag::kFunctionOpen:
      // The bare-<function= start is only trusted outside reasoning, where the model may
      // well discuss the format.
      return options_.tools_enabled && !in_reasoning;
  }
  return false;
}

bool ParserCore::step_text(bool final) {
  static constexpr struct {
    Tag tag;
    std::string_view text;
  } kTags[] = {{Tag::kThinkOpen, "<think>"},
               {Tag::kThinkClose, "</think>"},
               {Tag::kToolCallOpen, "<tool_call>"},
               {Tag::kFunctionOpen, "<function="}};
  const std::string_view r = rest();
  if (r.empty()) return false;
  const size_t lt = r.find('<');
  if (lt != 0) {
    const size_t n = lt == std::string_view::npos ? r.size() : lt;
    push_text(r.substr(0, n));
    pos_ += n;
    return true;
  }
  bool partial = false;
  for (const auto& t : kTags) {
    if (!tag_active(t.tag)) continue;
    const TagMatch m = match_tag(r, t.text);
    if (m == TagMatch::kFull) {
      pos_ += t.text.size();
      on_tag(t.tag);
      return true;
    }
    partial = partial || m == TagMatch::kPartial;
  }
  if (partial && !final) return false;  // wait for the bytes that decide it
  push_text(r.substr(0, 1));
  pos_ += 1;
  return true;
}

void ParserCore::on_tag(Tag tag) {
  switch (tag) {
    case Tag::kThinkOpen:
      if (mode_ == Mode::kContent) {
        mode_ = origin_ = Mode::kReasoning;
        reasoning_seen_ = true;
      }
      break;
    case Tag::kThinkClose:
      if (mode_ == Mode::kReasoning) end_reasoning();
      reasoning_ended_by_call_ = false;
      break;
    case Tag::kToolCallOpen:
      begin_call_text("<tool_call>", Mode::kToolOpen);
      break;
    case Tag::kFunctionOpen:
      begin_call_text("<function=", Mode::kFunctionName);
      break;
  }
}

void ParserCore::push_text(std::string_view text) {
  channel(mode_).push(text, channel_out(mode_));
}

void ParserCore::end_reasoning() {
  reasoning_.finish(delta_.reasoning);
  mode_ = origin_ = Mode::kContent;
}

}  // namespace ds
