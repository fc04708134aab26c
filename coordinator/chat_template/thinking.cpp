#include <cstring>

#include "coordinator/chat_template/chat_input.h"

namespace ds {
namespace {

bool is_gap(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

}  // namespace

std::optional<bool> strip_thinking_directives(std::string& text) {
  std::optional<bool> last;
  size_t i = 0;
  while ((i = text.find('/', i)) != std::string::npos) {
    size_t len = 0;
    bool think = false;
    if (text.compare(i, 9, "/no_think") == 0) {
      len = 9;
    } else if (text.compare(i, 6, "/think") == 0) {
      len = 6;
      think = true;
    }
    const bool starts_word = i == 0 || is_gap(text[i - 1]);
    const bool ends_word = i + len == text.size() || (i + len < text.size() && is_gap(text[i + len]));
    if (len == 0 || !starts_word || !ends_word) {
      ++i;
      continue;
    }
    last = think;
    size_t b = i;
    size_t e = i + len;
    if (e < text.size()) {
      ++e;  // "/no_think Hello" -> "Hello"
    } else if (b > 0) {
      --b;  // "Hello /no_think" -> "Hello"
    }
    text.erase(b, e - b);
    i = b;
  }
  return last;
}

}  // namespace ds
