// Tests (`x is name`) and global functions.
#include <cctype>
#include <chrono>
#include <ctime>
#include <map>

#include "coordinator/chat_template/args.h"
#include "coordinator/chat_template/builtins.h"
#include "coordinator/chat_template/errors.h"
#include "coordinator/chat_template/value_ops.h"

namespace ds::jinja {
namespace {

const Value& arg0(const CallArgs& a, const char* test) {
  if (a.positional.empty()) throw EvalError(std::string("test '") + test + "' needs an argument");
  return a.positional[0];
}

bool t_defined(const Value& v, const CallArgs&) {
  return !v.is_undefined();
}
bool t_undefined(const Value& v, const CallArgs&) {
  return v.is_undefined();
}
bool t_none(const Value& v, const CallArgs&) {
  return v.is_none();
}
bool t_string(const Value& v, const CallArgs&) {
  return v.is_string();
}
bool t_mapping(const Value& v, const CallArgs&) {
  return v.is_dict();
}
// Jinja's Undefined is iterable (empty) and looks like a sequence, so both tests accept it.
bool t_iterable(const Value& v, const CallArgs&) {
  return v.is_list() || v.is_dict() || v.is_string() || v.is_undefined();
}
bool t_sequence(const Value& v, const CallArgs&) {
  return v.is_list() || v.is_dict() || v.is_string() || v.is_undefined();
}
bool t_number(const Value& v, const CallArgs&) {
  return v.is_number();
}  // Python: bool is a Number
bool t_integer(const Value& v, const CallArgs&) {
  return v.is_int();
}
bool t_float(const Value& v, const CallArgs&) {
  return v.is_float();
}
bool t_boolean(const Value& v, const CallArgs&) {
  return v.is_bool();
}
bool t_true(const Value& v, const CallArgs&) {
  return v.is_bool() && v.as_bool();
}
bool t_false(const Value& v, const CallArgs&) {
  return v.is_bool() && !v.as_bool();
}
bool t_callable(const Value& v, const CallArgs&) {
  return v.is_callable();
}
bool t_eq(const Value& v, const CallArgs& a) {
  return values_equal(v, arg0(a, "eq"));
}
bool t_ne(const Value& v, const CallArgs& a) {
  return !values_equal(v, arg0(a, "ne"));
}
bool t_lt(const Value& v, const CallArgs& a) {
  return compare_op(CmpOp::kLt, v, arg0(a, "lt"));
}
bool t_le(const Value& v, const CallArgs& a) {
  return compare_op(CmpOp::kLe, v, arg0(a, "le"));
}
bool t_gt(const Value& v, const CallArgs& a) {
  return compare_op(CmpOp::kGt, v, arg0(a, "gt"));
}
bool t_ge(const Value& v, const CallArgs& a) {
  return compare_op(CmpOp::kGe, v, arg0(a, "ge"));
}
bool t_in(const Value& v, const CallArgs& a) {
  return contains(arg0(a, "in"), v);
}
bool t_odd(const Value& v, const CallArgs&) {
  return v.is_int() && (v.as_int() % 2 != 0);
}
bool t_even(const Value& v, const CallArgs&) {
  return v.is_int() && (v.as_int() % 2 == 0);
}
bool t_divisibleby(const Value& v, const CallArgs& a) {
  const Value& d = arg0(a, "divisibleby");
  if (!v.is_int() || !d.is_int() || d.as_int() == 0) throw EvalError("divisibleby needs non-zero integers");
  return v.as_int() % d.as_int() == 0;
}
bool t_sameas(const Value& v, const CallArgs& a) {
  const Value& o = arg0(a, "sameas");
  if (v.kind() != o.kind()) return false;
  if (v.is_list()) return &v.as_list() == &o.as_list();  // identity, as Python's `is`
  if (v.is_dict()) return &v.as_dict() == &o.as_dict();
  return values_equal(v, o);
}
bool t_lower(const Value& v, const CallArgs&) {
  if (!v.is_string()) return false;
  for (unsigned char c : v.as_text().str()) {
    if (std::isupper(c)) return false;
  }
  return true;
}
bool t_upper(const Value& v, const CallArgs&) {
  if (!v.is_string()) return false;
  for (unsigned char c : v.as_text().str()) {
    if (std::islower(c)) return false;
  }
  return true;
}

const std::map<std::string_view, TestFn>& test_table() {
  static const std::map<std::string_view, TestFn> kTable = {
      {"defined", t_defined},
      {"undefined", t_undefined},
      {"none", t_none},
      {"string", t_string},
      {"mapping", t_mapping},
      {"iterable", t_iterable},
      {"sequence", t_sequence},
      {"number", t_number},
      {"integer", t_integer},
      {"float", t_float},
      {"boolean", t_boolean},
      {"true", t_true},
      {"false", t_false},
      {"callable", t_callable},
      {"eq", t_eq},
      {"equalto", t_eq},
      {"==", t_eq},
      {"ne", t_ne},
      {"!=", t_ne},
      {"lt", t_lt},
      {"lessthan", t_lt},
      {"le", t_le},
      {"gt", t_gt},
      {"greaterthan", t_gt},
      {"ge", t_ge},
      {"in", t_in},
      {"odd", t_odd},
      {"even", t_even},
      {"divisibleby", t_divisibleby},
      {"sameas", t_sameas},
      {"lower", t_lower},
      {"upper", t_upper},
  };
  return kTable;
}

Value g_raise_exception(CallArgs& a) {
  ArgReader r("raise_exception", a, {"message"});
  throw TemplateRaise(to_text(r[0]).str());
}

Value g_namespace(CallArgs& a) {
  Value ns = Value::ns();
  Dict& attrs = ns.as_namespace().attrs;
  for (const Value& p : a.positional) {
    if (!p.is_dict()) throw EvalError("namespace(): positional argument must be a mapping");
    for (const auto& [k, v] : p.as_dict().entries) attrs.set(k, v);
  }
  for (const auto& [k, v] : a.named) attrs.set(Text::trusted(k), v);
  return ns;
}

Value g_dict(CallArgs& a) {
  Value d = Value::dict();
  for (const Value& p : a.positional) {
    if (!p.is_dict()) throw EvalError("dict(): positional argument must be a mapping");
    for (const auto& [k, v] : p.as_dict().entries) d.as_dict().set(k, v);
  }
  for (const auto& [k, v] : a.named) d.as_dict().set(Text::trusted(k), v);
  return d;
}

Value g_range(CallArgs& a, const Limits& lim) {
  ArgReader r("range", a, {"start", "stop", "step"});
  int64_t start = 0;
  int64_t stop = r.integer(0, "range", 0);
  if (r.has(1)) {
    start = stop;
    stop = r.integer(1, "range", 0);
  }
  const int64_t step = r.integer(2, "range", 1);
  if (step == 0) throw EvalError("range() arg 3 must not be zero");
  List out;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    if (out.size() >= lim.max_loop_iterations) throw EvalError("range() too large");
    out.push_back(Value::integer(i));
  }
  return Value::list(std::move(out));
}

Value g_strftime_now(CallArgs& a) {
  ArgReader r("strftime_now", a, {"format"});
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  localtime_r(&now, &tm);
  char buf[256];
  const size_t n = std::strftime(buf, sizeof(buf), r.text(0, "strftime_now").str().c_str(), &tm);
  return Value::trusted(std::string(buf, n));
}

}  // namespace

TestFn find_test(std::string_view name) {
  const auto& t = test_table();
  auto it = t.find(name);
  return it == t.end() ? nullptr : it->second;
}

std::vector<std::pair<std::string, Value>> global_functions(const Limits& limits) {
  return {
      {"raise_exception", Value::callable("raise_exception", g_raise_exception)},
      {"namespace", Value::callable("namespace", g_namespace)},
      {"dict", Value::callable("dict", g_dict)},
      {"range", Value::callable("range", [limits](CallArgs& a) { return g_range(a, limits); })},
      {"strftime_now", Value::callable("strftime_now", g_strftime_now)},
  };
}

}  // namespace ds::jinja
