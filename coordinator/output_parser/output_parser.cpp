#include "coordinator/output_parser/output_parser.h"

#include <utility>

#include "coordinator/output_parser/parser_core.h"

namespace ds {

OutputParser::OutputParser(OutputParserOptions options) : core_(std::make_unique<ParserCore>(std::move(options))) {}
OutputParser::~OutputParser() = default;
OutputParser::OutputParser(OutputParser&&) noexcept = default;
OutputParser& OutputParser::operator=(OutputParser&&) noexcept = default;

ParseDelta OutputParser::feed(std::string_view text) {
  ParseDelta out;
  core_->feed(text, out);
  return out;
}

ParseDelta OutputParser::finish() {
  ParseDelta out;
  core_->finish(out);
  return out;
}

const ParseResult& OutputParser::result() const {
  return core_->result();
}

}  // namespace ds
