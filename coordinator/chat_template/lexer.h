// Jinja lexer with the environment settings of the reference renderer (transformers'
// apply_chat_template): trim_blocks and lstrip_blocks on, `-`/`+` whitespace control, newlines
// normalized to "\n", one trailing newline of the source dropped.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ds::jinja {

struct Pos {
  int line = 1;
  int col = 1;
};

enum class Tok {
  kText,        // literal template text (already whitespace-processed)
  kVarBegin,    // {{
  kVarEnd,      // }}
  kBlockBegin,  // {%
  kBlockEnd,    // %}
  kName,
  kString,
  kInt,
  kFloat,
  kOp,  // punctuation/operator; text holds it ("==", "(", "|", ...)
  kEof,
};

struct Token {
  Tok type = Tok::kEof;
  std::string text;  // text, name, operator, or the unescaped string literal
  int64_t int_value = 0;
  double float_value = 0;
  Pos pos;
};

// Throws ds::TemplateError("chat template L:C: ...") on malformed input.
std::vector<Token> lex_template(const std::string& source);

// "chat template 3:14: <msg>"
std::string format_error(Pos pos, const std::string& msg);

}  // namespace ds::jinja
