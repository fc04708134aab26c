#include "coordinator/chat_template/lexer.h"

#include <cctype>
#include <cstring>
#include <string_view>

#include "common/utf8.h"
#include "coordinator/chat_template/errors.h"
#include "coordinator/chat_template/py_string.h"

namespace ds::jinja {

std::string format_error(Pos pos, const std::string& msg) {
  return "chat template " + std::to_string(pos.line) + ":" + std::to_string(pos.col) + ": " + msg;
}

namespace {

std::string normalize_newlines(const std::string& src) {
  std::string out;
  out.reserve(src.size());
  for (size_t i = 0; i < src.size(); ++i) {
    if (src[i] == '\r') {
      out += '\n';
      if (i + 1 < src.size() && src[i + 1] == '\n') ++i;
    } else {
      out += src[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();  // keep_trailing_newline=False
  return out;
}

class Lexer {
 public:
  explicit Lexer(std::string src) : s_(std::move(src)) {}

  std::vector<Token> run() {
    bool line_starting = true;  // the pending text begins at the start of a line
    enum class Trim { kNone, kNewline, kAll } trim_next = Trim::kNone;
    while (i_ < s_.size()) {
      const size_t tag = find_tag(i_);
      std::string text = s_.substr(i_, tag - i_);
      const Pos text_pos = pos_at(i_);
      if (trim_next == Trim::kAll) {
        text = text.substr(py_strip_bounds(text, nullptr, true, false).first);
      } else if (trim_next == Trim::kNewline && !text.empty() && text[0] == '\n') {
        text.erase(0, 1);
      }
      i_ = tag;
      if (tag == s_.size()) {
        emit_text(std::move(text), text_pos);
        break;
      }
      const char kind = s_[tag + 1];
      const char sign = tag + 2 < s_.size() ? s_[tag + 2] : '\0';
      if (sign == '-') {
        text.resize(py_strip_bounds(text, nullptr, false, true).second);
      } else if (sign != '+' && kind != '{') {
        lstrip_block(text, line_starting);
      }
      emit_text(std::move(text), text_pos);
      const bool strip_after = kind == '#' ? lex_comment() : lex_tag(kind);
      if (strip_after) {
        trim_next = Trim::kAll;
      } else {
        trim_next = kind == '{' ? Trim::kNone : Trim::kNewline;
      }
      // The next text starts a line when this tag is followed by a newline that trimming eats.
      line_starting = trim_next != Trim::kNone && i_ < s_.size() && s_[i_] == '\n';
    }
    out_.push_back(Token{Tok::kEof, "", 0, 0, pos_at(s_.size())});
    return std::move(out_);
  }

 private:
  size_t find_tag(size_t from) const {
    for (size_t k = from; k + 1 < s_.size(); ++k) {
      if (s_[k] == '{' && (s_[k + 1] == '{' || s_[k + 1] == '%' || s_[k + 1] == '#')) return k;
    }
    return s_.size();
  }

  // lstrip_blocks: whitespace between the start of the line and a block/comment tag goes.
  static void lstrip_block(std::string& text, bool line_starting) {
    const size_t nl = text.rfind('\n');
    const size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
    if (l_pos == 0 && !line_starting) return;
    const std::string_view tail(text.data() + l_pos, text.size() - l_pos);
    if (py_strip_bounds(tail, nullptr, true, false).first == tail.size()) text.resize(l_pos);
  }

  void emit_text(std::string text, Pos pos) {
    if (!text.empty()) out_.push_back(Token{Tok::kText, std::move(text), 0, 0, pos});
  }

  // Returns whether the comment ended with "-#}".
  bool lex_comment() {
    const size_t end = s_.find("#}", i_ + 2);
    if (end == std::string::npos) fail(i_, "unterminated comment");
    const bool strip = end > i_ + 2 && s_[end - 1] == '-';
    i_ = end + 2;
    return strip;
  }

  // Lexes `{{ ... }}` or `{% ... %}`; returns whether the tag ended with '-'.
  bool lex_tag(char kind) {
    const bool is_var = kind == '{';
    out_.push_back(Token{is_var ? Tok::kVarBegin : Tok::kBlockBegin, "", 0, 0, pos_at(i_)});
    i_ += 2;
    if (i_ < s_.size() && (s_[i_] == '-' || s_[i_] == '+')) ++i_;
    const char* close = is_var ? "}}" : "%}";
    for (;;) {
      while (i_ < s_.size() && std::strchr(" \t\n", s_[i_]) != nullptr) ++i_;
      if (i_ >= s_.size()) fail(i_, std::string("missing '") + close + "'");
      for (const char* sign : {"-", "+", ""}) {
        const std::string end = std::string(sign) + close;
        if (s_.compare(i_, end.size(), end) == 0 && !(is_var && *sign == '+')) {
          out_.push_back(Token{is_var ? Tok::kVarEnd : Tok::kBlockEnd, "", 0, 0, pos_at(i_)});
          i_ += end.size();
          return *sign == '-';
        }
      }
      lex_expr_token();
    }
  }

  void lex_expr_token() {
    const char c = s_[i_];
    const Pos p = pos_at(i_);
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      const size_t b = i_;
      while (i_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[i_])) || s_[i_] == '_')) ++i_;
      out_.push_back(Token{Tok::kName, s_.substr(b, i_ - b), 0, 0, p});
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      lex_number(p);
    } else if (c == '\'' || c == '"') {
      lex_string(p);
    } else {
      static const char* kOps[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "<",
                                   ">",  "=",  "(",  ")",  "[",  "]",  "{", "}", ",", ".", ":", "|"};
      for (const char* op : kOps) {
        const size_t n = std::strlen(op);
        if (s_.compare(i_, n, op) == 0) {
          out_.push_back(Token{Tok::kOp, op, 0, 0, p});
          i_ += n;
          return;
        }
      }
      fail(i_, std::string("unexpected character '") + c + "'");
    }
  }

  void lex_number(Pos p) {
    const size_t b = i_;
    auto digits = [&] {
      while (i_ < s_.size() && (std::isdigit(static_cast<unsigned char>(s_[i_])) || s_[i_] == '_')) ++i_;
    };
    digits();
    bool is_float = false;
    if (i_ + 1 < s_.size() && s_[i_] == '.' && std::isdigit(static_cast<unsigned char>(s_[i_ + 1]))) {
      is_float = true;
      ++i_;
      digits();
    }
    if (i_ < s_.size() && (s_[i_] == 'e' || s_[i_] == 'E')) {
      size_t k = i_ + 1;
      if (k < s_.size() && (s_[k] == '+' || s_[k] == '-')) ++k;
      if (k < s_.size() && std::isdigit(static_cast<unsigned char>(s_[k]))) {
        is_float = true;
        i_ = k;
        digits();
      }
    }
    std::string text;
    for (size_t k = b; k < i_; ++k) {
      if (s_[k] != '_') text += s_[k];
    }
    Token t{is_float ? Tok::kFloat : Tok::kInt, text, 0, 0, p};
    try {
      if (is_float) {
        t.float_value = std::stod(text);
      } else {
        t.int_value = std::stoll(text);
      }
    } catch (const std::exception&) {
      fail(b, "number out of range");
    }
    out_.push_back(std::move(t));
  }

  void lex_string(Pos p) {
    const char quote = s_[i_];
    const size_t start = i_++;
    std::string value;
    for (;;) {
      if (i_ >= s_.size()) fail(start, "unterminated string literal");
      const char c = s_[i_++];
      if (c == quote) break;
      if (c != '\\') {
        value += c;
        continue;
      }
      if (i_ >= s_.size()) fail(start, "unterminated string literal");
      unescape(s_[i_++], value);
    }
    out_.push_back(Token{Tok::kString, std::move(value), 0, 0, p});
  }

  // Python 'unicode-escape' rules (what Jinja applies to string literals).
  void unescape(char e, std::string& value) {
    switch (e) {
      case 'n':
        value += '\n';
        return;
      case 't':
        value += '\t';
        return;
      case 'r':
        value += '\r';
        return;
      case '\\':
        value += '\\';
        return;
      case '\'':
        value += '\'';
        return;
      case '"':
        value += '"';
        return;
      case 'b':
        value += '\b';
        return;
      case 'f':
        value += '\f';
        return;
      case 'v':
        value += '\v';
        return;
      case 'a':
        value += '\a';
        return;
      case '\n':
        return;  // line continuation
      case 'x':
        value_hex(2, value);
        return;
      case 'u':
        value_hex(4, value);
        return;
      case 'U':
        value_hex(8, value);
        return;
      default:
        value += '\\';
        value += e;
    }
  }

  void value_hex(size_t n, std::string& value) {
    if (i_ + n > s_.size()) fail(i_, "truncated escape sequence");
    uint32_t cp = 0;
    for (size_t k = 0; k < n; ++k) {
      const char h = s_[i_ + k];
      if (!std::isxdigit(static_cast<unsigned char>(h))) fail(i_, "bad escape sequence");
      cp = cp * 16 +
           static_cast<uint32_t>(std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : (std::tolower(h) - 'a' + 10));
    }
    if (cp > 0x10FFFF) fail(i_, "escape out of range");
    i_ += n;
    utf8::append(value, cp);
  }

  Pos pos_at(size_t off) {
    // Incremental: offsets are requested in increasing order almost always.
    if (off < pos_off_) {
      pos_off_ = 0;
      pos_ = Pos{};
    }
    for (; pos_off_ < off && pos_off_ < s_.size(); ++pos_off_) {
      if (s_[pos_off_] == '\n') {
        ++pos_.line;
        pos_.col = 1;
      } else if (!utf8::is_continuation(static_cast<uint8_t>(s_[pos_off_]))) {
        ++pos_.col;
      }
    }
    return pos_;
  }

  [[noreturn]] void fail(size_t off, const std::string& msg) { throw TemplateError(format_error(pos_at(off), msg)); }

  std::string s_;
  size_t i_ = 0;
  std::vector<Token> out_;
  size_t pos_off_ = 0;
  Pos pos_;
};

}  // namespace

std::vector<Token> lex_template(const std::string& source) {
  return Lexer(normalize_newlines(source)).run();
}

}  // namespace ds::jinja
