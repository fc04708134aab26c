// Runtime values of the template language: a small Python-like variant. Lists, dicts and
// namespaces are reference types (shared_ptr), as in Python: `set ns.x = ...` mutates the
// namespace seen everywhere.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "coordinator/chat_template/text.h"

namespace ds::jinja {

// Raised by builtins and value operations; the evaluator adds the template position and
// rethrows it as ds::TemplateError.
class EvalError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Value;
struct Dict;
struct Namespace;
struct Callable;
using List = std::vector<Value>;

struct Undefined {};
struct NoneType {};

class Value {
 public:
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kNamespace, kCallable };

  Value() = default;  // undefined
  static Value none() { return Value(Storage(NoneType{})); }
  static Value boolean(bool b) { return Value(Storage(b)); }
  static Value integer(int64_t i) { return Value(Storage(i)); }
  static Value number(double d) { return Value(Storage(d)); }
  static Value string(Text t) { return Value(Storage(std::move(t))); }
  static Value trusted(std::string s) { return string(Text::trusted(std::move(s))); }
  static Value untrusted(std::string s) { return string(Text::untrusted(std::move(s))); }
  static Value list(List items = {});
  static Value dict();
  static Value dict(std::shared_ptr<Dict> d) { return Value(Storage(std::move(d))); }
  static Value ns();
  static Value callable(std::string name, std::function<Value(struct CallArgs&)> fn);

  Kind kind() const { return static_cast<Kind>(v_.index()); }
  bool is_undefined() const { return kind() == Kind::kUndefined; }
  bool is_none() const { return kind() == Kind::kNone; }
  bool is_bool() const { return kind() == Kind::kBool; }
  bool is_int() const { return kind() == Kind::kInt; }
  bool is_float() const { return kind() == Kind::kFloat; }
  bool is_number() const { return is_int() || is_float() || is_bool(); }
  bool is_string() const { return kind() == Kind::kString; }
  bool is_list() const { return kind() == Kind::kList; }
  bool is_dict() const { return kind() == Kind::kDict; }
  bool is_namespace() const { return kind() == Kind::kNamespace; }
  bool is_callable() const { return kind() == Kind::kCallable; }

  bool as_bool() const { return std::get<bool>(v_); }
  int64_t as_int() const { return std::get<int64_t>(v_); }
  double as_float() const { return std::get<double>(v_); }
  const Text& as_text() const { return std::get<Text>(v_); }
  List& as_list() const { return *std::get<std::shared_ptr<List>>(v_); }
  Dict& as_dict() const { return *std::get<std::shared_ptr<Dict>>(v_); }
  Namespace& as_namespace() const { return *std::get<std::shared_ptr<Namespace>>(v_); }
  Callable& as_callable() const { return *std::get<std::shared_ptr<Callable>>(v_); }

  // Numeric view for arithmetic (bool counts as int, as in Python).
  double to_double() const;
  bool truthy() const;
  const char* type_name() const;  // Python-ish names for error messages

 private:
  using Storage = std::variant<Undefined, NoneType, bool, int64_t, double, Text, std::shared_ptr<List>,
                               std::shared_ptr<Dict>, std::shared_ptr<Namespace>, std::shared_ptr<Callable>>;
  explicit Value(Storage v) : v_(std::move(v)) {}
  Storage v_;
};

// Insertion-ordered string-keyed mapping (JSON objects keep their key order, which tojson
// must reproduce). Keys are Texts so that keys taken from request JSON stay untrusted.
struct Dict {
  std::vector<std::pair<Text, Value>> entries;

  const Value* find(std::string_view key) const;
  Value* find(std::string_view key);
  void set(Text key, Value v);  // replaces in place when the key exists
};

struct Namespace {
  Dict attrs;
};

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> named;
};

struct Callable {
  std::string name;
  std::function<Value(CallArgs&)> fn;
};

bool values_equal(const Value& a, const Value& b);

// Python str() of a value, provenance kept for strings (a string prints as itself).
Text to_text(const Value& v);
// Python repr() (used for printing lists and dicts).
std::string py_repr(const Value& v);
// Python float repr: shortest round-trip digits, "1.0", "1e-05", "1e+16", "inf", "nan".
std::string py_float_repr(double d);
// True when any string reachable from v (dict keys included) has an untrusted byte.
bool contains_untrusted(const Value& v);

}  // namespace ds::jinja
