#include "coordinator/chat_template/value_ops.h"

#include <cmath>

#include "common/utf8.h"
#include "coordinator/chat_template/methods.h"

namespace ds::jinja {
namespace {

[[noreturn]] void bad_operands(const char* op, const Value& a, const Value& b) {
  throw EvalError(std::string("unsupported operand types for ") + op + ": '" + a.type_name() + "' and '" +
                  b.type_name() + "'");
}

int64_t int_of(const Value& v) {
  return v.is_bool() ? static_cast<int64_t>(v.as_bool()) : v.as_int();
}
bool both_int(const Value& a, const Value& b) {
  return (a.is_int() || a.is_bool()) && (b.is_int() || b.is_bool());
}

Value repeat(const Value& seq, int64_t n, size_t max_bytes) {
  n = std::max<int64_t>(n, 0);
  if (seq.is_string()) {
    const Text& t = seq.as_text();
    if (!t.empty() && static_cast<uint64_t>(n) > max_bytes / t.size()) throw EvalError("string repetition too large");
    Text out;
    for (int64_t i = 0; i < n; ++i) out.append(t);
    return Value::string(std::move(out));
  }
  const List& l = seq.as_list();
  if (!l.empty() && static_cast<uint64_t>(n) > max_bytes / l.size()) throw EvalError("list repetition too large");
  List out;
  for (int64_t i = 0; i < n; ++i) out.insert(out.end(), l.begin(), l.end());
  return Value::list(std::move(out));
}

Value arith_int(BinOp op, int64_t x, int64_t y) {
  int64_t r = 0;
  switch (op) {
    case BinOp::kAdd:
      if (__builtin_add_overflow(x, y, &r)) throw EvalError("integer overflow");
      return Value::integer(r);
    case BinOp::kSub:
      if (__builtin_sub_overflow(x, y, &r)) throw EvalError("integer overflow");
      return Value::integer(r);
    case BinOp::kMul:
      if (__builtin_mul_overflow(x, y, &r)) throw EvalError("integer overflow");
      return Value::integer(r);
    case BinOp::kFloorDiv:
    case BinOp::kMod: {
      if (y == 0) throw EvalError("integer division or modulo by zero");
      if (x == INT64_MIN && y == -1) throw EvalError("integer overflow");
      int64_t q = x / y;
      int64_t m = x % y;
      if (m != 0 && ((m < 0) != (y < 0))) {  // Python floors toward -inf
        --q;
        m += y;
      }
      return Value::integer(op == BinOp::kFloorDiv ? q : m);
    }
    case BinOp::kPow: {
      if (y < 0) return Value::number(std::pow(static_cast<double>(x), static_cast<double>(y)));
      int64_t acc = 1;
      for (int64_t i = 0; i < y; ++i) {
        if (__builtin_mul_overflow(acc, x, &acc)) throw EvalError("integer overflow");
        if (acc == 0 || acc == 1) break;
      }
      return Value::integer(acc);
    }
    default:
      break;
  }
  throw EvalError("bad integer operation");
}

Value arith_float(BinOp op, double x, double y) {
  switch (op) {
    case BinOp::kAdd:
      return Value::number(x + y);
    case BinOp::kSub:
      return Value::number(x - y);
    case BinOp::kMul:
      return Value::number(x * y);
    case BinOp::kDiv:
      if (y == 0) throw EvalError("division by zero");
      return Value::number(x / y);
    case BinOp::kFloorDiv:
      if (y == 0) throw EvalError("float floor division by zero");
      return Value::number(std::floor(x / y));
    case BinOp::kMod: {
      if (y == 0) throw EvalError("float modulo by zero");
      double m = std::fmod(x, y);
      if (m != 0 && ((m < 0) != (y < 0))) m += y;
      return Value::number(m);
    }
    case BinOp::kPow:
      return Value::number(std::pow(x, y));
    default:
      break;
  }
  throw EvalError("bad float operation");
}

const char* op_symbol(BinOp op) {
  switch (op) {
    case BinOp::kAdd:
      return "+";
    case BinOp::kSub:
      return "-";
    case BinOp::kMul:
      return "*";
    case BinOp::kDiv:
      return "/";
    case BinOp::kFloorDiv:
      return "//";
    case BinOp::kMod:
      return "%";
    case BinOp::kPow:
      return "**";
    default:
      return "?";
  }
}

// Python slice.indices(len): clamps bounds and returns the selected positions.
std::vector<size_t> slice_positions(int64_t len, const Value& start, const Value& stop, const Value& step) {
  auto as_bound = [](const Value& v, const char* what) -> std::optional<int64_t> {
    if (v.is_undefined() || v.is_none()) return std::nullopt;
    if (!v.is_int() && !v.is_bool()) throw EvalError(std::string("slice ") + what + " must be an integer");
    return int_of(v);
  };
  const int64_t st = as_bound(step, "step").value_or(1);
  if (st == 0) throw EvalError("slice step cannot be zero");
  auto clamp = [&](std::optional<int64_t> v, int64_t def) {
    if (!v) return def;
    int64_t x = *v < 0 ? *v + len : *v;
    if (st > 0) return std::clamp<int64_t>(x, 0, len);
    return std::clamp<int64_t>(x, -1, len - 1);
  };
  const int64_t b = clamp(as_bound(start, "start"), st > 0 ? 0 : len - 1);
  const int64_t e = clamp(as_bound(stop, "stop"), st > 0 ? len : -1);
  std::vector<size_t> out;
  for (int64_t i = b; st > 0 ? i < e : i > e; i += st) out.push_back(static_cast<size_t>(i));
  return out;
}

}  // namespace

Value binary_op(BinOp op, const Value& a, const Value& b, size_t max_bytes) {
  if (op == BinOp::kConcat) {
    Text t = to_text(a);
    if (t.size() + to_text(b).size() > max_bytes) throw EvalError("string too large");
    t.append(to_text(b));
    return Value::string(std::move(t));
  }
  if (op == BinOp::kAdd && a.is_string() && b.is_string()) {
    if (a.as_text().size() + b.as_text().size() > max_bytes) throw EvalError("string too large");
    Text t = a.as_text();
    t.append(b.as_text());
    return Value::string(std::move(t));
  }
  if (op == BinOp::kAdd && a.is_list() && b.is_list()) {
    List l = a.as_list();
    l.insert(l.end(), b.as_list().begin(), b.as_list().end());
    return Value::list(std::move(l));
  }
  if (op == BinOp::kMul && (a.is_string() || a.is_list()) && (b.is_int() || b.is_bool()))
    return repeat(a, int_of(b), max_bytes);
  if (op == BinOp::kMul && (b.is_string() || b.is_list()) && (a.is_int() || a.is_bool()))
    return repeat(b, int_of(a), max_bytes);
  if (!a.is_number() || !b.is_number()) bad_operands(op_symbol(op), a, b);
  if (both_int(a, b) && op != BinOp::kDiv) return arith_int(op, int_of(a), int_of(b));
  return arith_float(op, a.to_double(), b.to_double());
}

Value negate(const Value& v) {
  if (v.is_int() || v.is_bool()) {
    if (int_of(v) == INT64_MIN) throw EvalError("integer overflow");
    return Value::integer(-int_of(v));
  }
  if (v.is_float()) return Value::number(-v.as_float());
  throw EvalError(std::string("bad operand type for unary -: '") + v.type_name() + "'");
}

bool compare_op(CmpOp op, const Value& a, const Value& b) {
  switch (op) {
    case CmpOp::kEq:
      return values_equal(a, b);
    case CmpOp::kNe:
      return !values_equal(a, b);
    case CmpOp::kIn:
      return contains(b, a);
    case CmpOp::kNotIn:
      return !contains(b, a);
    default:
      break;
  }
  int c = 0;
  if (a.is_number() && b.is_number()) {
    const double x = a.to_double();
    const double y = b.to_double();
    c = x < y ? -1 : (x > y ? 1 : 0);
    if (std::isnan(x) || std::isnan(y)) return false;
  } else if (a.is_string() && b.is_string()) {
    c = a.as_text().str().compare(b.as_text().str());  // UTF-8 byte order == code point order
  } else {
    throw EvalError(std::string("cannot compare '") + a.type_name() + "' with '" + b.type_name() + "'");
  }
  switch (op) {
    case CmpOp::kLt:
      return c < 0;
    case CmpOp::kLe:
      return c <= 0;
    case CmpOp::kGt:
      return c > 0;
    default:
      return c >= 0;
  }
}

bool contains(const Value& container, const Value& item) {
  if (container.is_string()) {
    if (!item.is_string()) throw EvalError("'in <string>' requires a string as left operand");
    return container.as_text().str().find(item.as_text().str()) != std::string::npos;
  }
  if (container.is_list()) {
    for (const Value& x : container.as_list()) {
      if (values_equal(x, item)) return true;
    }
    return false;
  }
  if (container.is_dict()) return item.is_string() && container.as_dict().find(item.as_text().str()) != nullptr;
  if (container.is_namespace())
    return item.is_string() && container.as_namespace().attrs.find(item.as_text().str()) != nullptr;
  throw EvalError(std::string("argument of type '") + container.type_name() + "' is not iterable");
}

Value get_attr(const Value& obj, const std::string& name) {
  if (name.empty() || name[0] == '_') return {};  // sandbox: no private attributes
  if (Value m = bound_method(obj, name); !m.is_undefined()) return m;
  if (obj.is_dict()) {
    const Value* v = obj.as_dict().find(name);
    return v ? *v : Value();
  }
  if (obj.is_namespace()) {
    const Value* v = obj.as_namespace().attrs.find(name);
    return v ? *v : Value();
  }
  return {};
}

Value get_item(const Value& obj, const Value& key) {
  if (obj.is_dict() || obj.is_namespace()) {
    if (!key.is_string()) return {};
    const Dict& d = obj.is_dict() ? obj.as_dict() : obj.as_namespace().attrs;
    const Value* v = d.find(key.as_text().str());
    return v ? *v : Value();
  }
  if ((obj.is_list() || obj.is_string()) && (key.is_int() || key.is_bool())) {
    std::vector<size_t> b;
    const int64_t len = obj.is_list()
                            ? static_cast<int64_t>(obj.as_list().size())
                            : static_cast<int64_t>((b = utf8::boundaries_loose(obj.as_text().str())).size() - 1);
    int64_t i = int_of(key);
    if (i < 0) i += len;
    if (i < 0 || i >= len) return {};
    if (obj.is_list()) return obj.as_list()[static_cast<size_t>(i)];
    const auto k = static_cast<size_t>(i);
    return Value::string(obj.as_text().slice(b[k], b[k + 1] - b[k]));
  }
  if (key.is_string()) return get_attr(obj, key.as_text().str());
  return {};
}

Value get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step) {
  if (obj.is_list()) {
    const List& l = obj.as_list();
    List out;
    for (size_t i : slice_positions(static_cast<int64_t>(l.size()), start, stop, step)) out.push_back(l[i]);
    return Value::list(std::move(out));
  }
  if (obj.is_string()) {
    const Text& t = obj.as_text();
    const std::vector<size_t> b = utf8::boundaries_loose(t.str());
    Text out;
    for (size_t i : slice_positions(static_cast<int64_t>(b.size() - 1), start, stop, step)) {
      out.append_slice(t, b[i], b[i + 1] - b[i]);
    }
    return Value::string(std::move(out));
  }
  if (obj.is_undefined()) return {};
  throw EvalError(std::string("'") + obj.type_name() + "' object is not subscriptable");
}

List iteration_items(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return {};
    case Value::Kind::kList:
      return v.as_list();
    case Value::Kind::kDict: {
      List keys;
      for (const auto& [k, x] : v.as_dict().entries) keys.push_back(Value::string(k));
      return keys;
    }
    case Value::Kind::kString: {
      const Text& t = v.as_text();
      const std::vector<size_t> b = utf8::boundaries_loose(t.str());
      List chars;
      for (size_t i = 0; i + 1 < b.size(); ++i) chars.push_back(Value::string(t.slice(b[i], b[i + 1] - b[i])));
      return chars;
    }
    default:
      throw EvalError(std::string("'") + v.type_name() + "' object is not iterable");
  }
}

int64_t length_of(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return 0;
    case Value::Kind::kString:
      return static_cast<int64_t>(utf8::length_loose(v.as_text().str()));
    case Value::Kind::kList:
      return static_cast<int64_t>(v.as_list().size());
    case Value::Kind::kDict:
      return static_cast<int64_t>(v.as_dict().entries.size());
    case Value::Kind::kNamespace:
      return static_cast<int64_t>(v.as_namespace().attrs.entries.size());
    default:
      throw EvalError(std::string("object of type '") + v.type_name() + "' has no len()");
  }
}

}  // namespace ds::jinja
