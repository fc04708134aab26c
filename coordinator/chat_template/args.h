// Binds call arguments (positional and keyword) to named parameter slots, Python-style.
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "coordinator/chat_template/value.h"

namespace ds::jinja {

class ArgReader {
 public:
  ArgReader(std::string_view fn, const CallArgs& args, std::initializer_list<std::string_view> names) {
    if (args.positional.size() > names.size()) {
      throw EvalError(std::string(fn) + "() takes at most " + std::to_string(names.size()) + " arguments");
    }
    slots_.resize(names.size());
    given_.resize(names.size(), false);
    for (size_t i = 0; i < args.positional.size(); ++i) {
      slots_[i] = args.positional[i];
      given_[i] = true;
    }
    for (const auto& [name, v] : args.named) {
      size_t i = 0;
      for (std::string_view n : names) {
        if (n == name) break;
        ++i;
      }
      if (i == names.size()) throw EvalError(std::string(fn) + "() got an unexpected keyword argument '" + name + "'");
      if (given_[i]) throw EvalError(std::string(fn) + "() got multiple values for argument '" + name + "'");
      slots_[i] = v;
      given_[i] = true;
    }
  }

  const Value& operator[](size_t i) const { return slots_[i]; }
  bool has(size_t i) const { return given_[i] && !slots_[i].is_undefined(); }
  // A string argument, or an error naming the function.
  const Text& text(size_t i, std::string_view fn) const {
    if (!slots_[i].is_string()) throw EvalError(std::string(fn) + "(): expected a string argument");
    return slots_[i].as_text();
  }
  int64_t integer(size_t i, std::string_view fn, int64_t fallback) const {
    if (!has(i) || slots_[i].is_none()) return fallback;
    if (slots_[i].is_int()) return slots_[i].as_int();
    if (slots_[i].is_bool()) return slots_[i].as_bool();
    throw EvalError(std::string(fn) + "(): expected an integer argument");
  }

 private:
  std::vector<Value> slots_;
  std::vector<bool> given_;
};

}  // namespace ds::jinja
