// The text pipeline of one generated choice: token ids → incremental UTF-8 decoding → stop
// strings → (chat) reasoning / content / tool-call splitting. Each step returns only what has
// become certain, so streaming and non-streaming responses share one code path.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "coordinator/openai/stop_matcher.h"
#include "coordinator/output_parser/output_parser.h"
#include "coordinator/tokenizer/incremental_decoder.h"
#include "coordinator/tokenizer/tokenizer.h"

namespace ds::openai {

class OutputStream {
 public:
  // `parser`: chat requests (reasoning and tool calls are split out); nullopt: plain text
  // (/v1/completions), reported as `content`. `echo` (plain text only): text that precedes
  // the generated text, untouched by stop strings; the first delta carries it. The text of the
  // first `min_tokens` generated tokens is not searched for stop strings (vLLM's min_tokens).
  OutputStream(const Tokenizer& tokenizer, std::vector<std::string> stop, std::optional<OutputParserOptions> parser,
               std::string echo = {}, uint32_t min_tokens = 0);

  // One generated token. End-of-generation tokens produce no text.
  ParseDelta add_token(int32_t id);
  // End of generation: releases everything held back. Idempotent.
  ParseDelta finish();

  // A stop string was matched: the caller ends the request (finish reason "stop").
  bool stopped() const { return stop_.stopped(); }
  // Everything emitted so far (complete after finish()).
  const ParseResult& result() const;

 private:
  ParseDelta route(const std::string& text);
  ParseDelta next_token(int32_t id);
  ParseDelta finish_text();
  ParseDelta with_echo(ParseDelta d);

  const Tokenizer* tokenizer_;
  IncrementalDecoder decoder_;
  StopMatcher stop_;
  std::optional<OutputParser> parser_;
  ParseResult plain_;  // accumulated text when there is no parser
  std::string echo_;   // not yet emitted
  bool finished_ = false;
  uint32_t unmatched_tokens_ = 0;  // generated tokens still to come whose text skips the stop strings
};

}  // namespace ds::openai
