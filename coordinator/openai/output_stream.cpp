#include "coordinator/openai/output_stream.h"

namespace ds::openai {

OutputStream::OutputStream(const Tokenizer& tokenizer, std::vector<std::string> stop,
                           std::optional<OutputParserOptions> parser, std::string echo, uint32_t min_tokens)
    : tokenizer_(&tokenizer),
      decoder_(tokenizer, /*render_control=*/false),
      stop_(std::move(stop)),
      unmatched_tokens_(min_tokens) {
  if (parser) {
    parser_.emplace(std::move(*parser));
  } else {
    plain_.content = echo;
    echo_ = std::move(echo);
  }
}

ParseDelta OutputStream::with_echo(ParseDelta d) {
  if (!echo_.empty()) {
    d.content.insert(0, echo_);
    echo_.clear();
  }
  return d;
}

ParseDelta OutputStream::add_token(int32_t id) {
  return with_echo(next_token(id));
}

ParseDelta OutputStream::finish() {
  return with_echo(finish_text());
}

ParseDelta OutputStream::route(const std::string& text) {
  if (parser_) return parser_->feed(text);
  ParseDelta d;
  d.content = text;
  plain_.content += text;
  return d;
}

ParseDelta OutputStream::next_token(int32_t id) {
  if (finished_ || stop_.stopped() || tokenizer_->is_eog(id)) return {};
  std::string text;
  try {
    text = decoder_.feed(id);
  } catch (const std::out_of_range&) {
    return {};  // an id outside the vocabulary contributes nothing
  }
  if (unmatched_tokens_ > 0) {
    --unmatched_tokens_;
    return route(text);
  }
  if (text.empty()) return {};
  StopMatcher::Result r = stop_.feed(text);
  ParseDelta d = route(r.text);
  if (r.stopped) {
    // Nothing after the stop string will come: resolve what the parser holds now.
    ParseDelta tail = finish_text();
    d.reasoning += tail.reasoning;
    d.content += tail.content;
    for (auto& t : tail.tool_calls) d.tool_calls.push_back(std::move(t));
  }
  return d;
}

ParseDelta OutputStream::finish_text() {
  if (finished_) return {};
  finished_ = true;
  std::string rest;
  if (!stop_.stopped()) {
    rest = decoder_.flush();
    StopMatcher::Result r = stop_.feed(rest);
    rest = r.text + (r.stopped ? std::string() : stop_.flush());
  }
  ParseDelta d = rest.empty() ? ParseDelta{} : route(rest);
  if (parser_) {
    ParseDelta tail = parser_->finish();
    d.reasoning += tail.reasoning;
    d.content += tail.content;
    for (auto& t : tail.tool_calls) d.tool_calls.push_back(std::move(t));
  }
  return d;
}

const ParseResult& OutputStream::result() const {
  return parser_ ? parser_->result() : plain_;
}

}  // namespace ds::openai
