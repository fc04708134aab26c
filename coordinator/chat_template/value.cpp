#include "coordinator/chat_template/value.h"

#include <charconv>
#include <cmath>
#include <cstdlib>

namespace ds::jinja {

Value Value::list(List items) {
  return Value(Storage(std::make_shared<List>(std::move(items))));
}
Value Value::dict() {
  return Value(Storage(std::make_shared<Dict>()));
}
Value Value::ns() {
  return Value(Storage(std::make_shared<Namespace>()));
}

Value Value::callable(std::string name, std::function<Value(CallArgs&)> fn) {
  auto c = std::make_shared<Callable>();
  c->name = std::move(name);
  c->fn = std::move(fn);
  return Value(Storage(std::move(c)));
}

double Value::to_double() const {
  switch (kind()) {
    case Kind::kBool:
      return as_bool() ? 1.0 : 0.0;
    case Kind::kInt:
      return static_cast<double>(as_int());
    case Kind::kFloat:
      return as_float();
    default:
      throw EvalError(std::string("expected a number, got ") + type_name());
  }
}

bool Value::truthy() const {
  switch (kind()) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
      return as_bool();
    case Kind::kInt:
      return as_int() != 0;
    case Kind::kFloat:
      return as_float() != 0.0;
    case Kind::kString:
      return !as_text().empty();
    case Kind::kList:
      return !as_list().empty();
    case Kind::kDict:
      return !as_dict().entries.empty();
    case Kind::kNamespace:
    case Kind::kCallable:
      return true;
  }
  return false;
}

const char* Value::type_name() const {
  static constexpr const char* kNames[] = {"undefined", "none", "bool",    "int",       "float",
                                           "string",    "list", "mapping", "namespace", "callable"};
  return kNames[static_cast<int>(kind())];
}

const Value* Dict::find(std::string_view key) const {
  for (const auto& [k, v] : entries) {
    if (k.str() == key) return &v;
  }
  return nullptr;
}

Value* Dict::find(std::string_view key) {
  for (auto& [k, v] : entries) {
    if (k.str() == key) return &v;
  }
  return nullptr;
}

void Dict::set(Text key, Value v) {
  if (Value* existing = find(key.str())) {
    *existing = std::move(v);
    return;
  }
  entries.emplace_back(std::move(key), std::move(v));
}

namespace {

// Values built by a template loop can nest arbitrarily deep; recursion on them is bounded.
constexpr int kMaxDepth = 512;

void check_depth(int depth) {
  if (depth > kMaxDepth) throw EvalError("value nested too deeply");
}

bool equal_at(const Value& a, const Value& b, int depth);

}  // namespace

bool values_equal(const Value& a, const Value& b) {
  return equal_at(a, b, 0);
}

namespace {

bool equal_at(const Value& a, const Value& b, int depth) {
  check_depth(depth);
  using K = Value::Kind;
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.to_double() == b.to_double();
    const int64_t x = a.is_bool() ? a.as_bool() : a.as_int();
    const int64_t y = b.is_bool() ? b.as_bool() : b.as_int();
    return x == y;
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case K::kUndefined:
    case K::kNone:
      return true;
    case K::kString:
      return a.as_text().str() == b.as_text().str();
    case K::kList: {
      const List& x = a.as_list();
      const List& y = b.as_list();
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i) {
        if (!equal_at(x[i], y[i], depth + 1)) return false;
      }
      return true;
    }
    case K::kDict: {
      const Dict& x = a.as_dict();
      const Dict& y = b.as_dict();
      if (x.entries.size() != y.entries.size()) return false;
      for (const auto& [k, v] : x.entries) {
        const Value* other = y.find(k.str());
        if (other == nullptr || !equal_at(v, *other, depth + 1)) return false;
      }
      return true;
    }
    case K::kNamespace:
      return &a.as_namespace() == &b.as_namespace();
    case K::kCallable:
      return &a.as_callable() == &b.as_callable();
    default:
      return false;
  }
}

}  // namespace

std::string py_float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  // Shortest round-trip digits in scientific form, then laid out the way Python's repr does:
  // positional notation for exponents in [-4, 16), scientific otherwise.
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  const size_t epos = sci.find('e');
  std::string mant = sci.substr(0, epos);
  const int exp = std::atoi(sci.c_str() + epos + 1);
  std::string sign;
  if (!mant.empty() && mant[0] == '-') {
    sign = "-";
    mant.erase(0, 1);
  }
  std::string digits;
  for (char c : mant) {
    if (c != '.') digits += c;
  }
  if (exp < -4 || exp >= 16) {
    std::string out = sign + digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char eb[16];
    std::snprintf(eb, sizeof(eb), "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
    return out + eb;
  }
  if (exp < 0) return sign + "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
  const size_t int_len = static_cast<size_t>(exp) + 1;
  if (digits.size() <= int_len) return sign + digits + std::string(int_len - digits.size(), '0') + ".0";
  return sign + digits.substr(0, int_len) + "." + digits.substr(int_len);
}

namespace {

std::string py_str_repr(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos;
  const bool has_double = s.find('"') != std::string::npos;
  const char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, quote);
  for (unsigned char c : s) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == static_cast<unsigned char>(quote)) {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7F) {
      char b[8];
      std::snprintf(b, sizeof(b), "\\x%02x", c);
      out += b;
    } else {
      out += static_cast<char>(c);
    }
  }
  out += quote;
  return out;
}

}  // namespace

namespace {

std::string repr_at(const Value& v, int depth) {
  check_depth(depth);
  switch (v.kind()) {
    case Value::Kind::kString:
      return py_str_repr(v.as_text().str());
    case Value::Kind::kList: {
      std::string out = "[";
      const List& l = v.as_list();
      for (size_t i = 0; i < l.size(); ++i) out += (i ? ", " : "") + repr_at(l[i], depth + 1);
      return out + "]";
    }
    case Value::Kind::kDict: {
      std::string out = "{";
      bool first = true;
      for (const auto& [k, val] : v.as_dict().entries) {
        out += (first ? "" : ", ") + py_str_repr(k.str()) + ": " + repr_at(val, depth + 1);
        first = false;
      }
      return out + "}";
    }
    default:
      return to_text(v).str();
  }
}

}  // namespace

std::string py_repr(const Value& v) {
  return repr_at(v, 0);
}

Text to_text(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return {};
    case Value::Kind::kNone:
      return Text::trusted("None");
    case Value::Kind::kBool:
      return Text::trusted(v.as_bool() ? "True" : "False");
    case Value::Kind::kInt:
      return Text::trusted(std::to_string(v.as_int()));
    case Value::Kind::kFloat:
      return Text::trusted(py_float_repr(v.as_float()));
    case Value::Kind::kString:
      return v.as_text();
    case Value::Kind::kList:
    case Value::Kind::kDict:
      return Text::derived(py_repr(v), contains_untrusted(v));
    case Value::Kind::kNamespace:
      return Text::trusted("<Namespace>");
    case Value::Kind::kCallable:
      return Text::trusted("<function " + v.as_callable().name + ">");
  }
  return {};
}

namespace {

bool untrusted_at(const Value& v, int depth) {
  check_depth(depth);
  switch (v.kind()) {
    case Value::Kind::kString:
      return v.as_text().any_untrusted();
    case Value::Kind::kList:
      for (const Value& x : v.as_list()) {
        if (untrusted_at(x, depth + 1)) return true;
      }
      return false;
    case Value::Kind::kDict:
      for (const auto& [k, x] : v.as_dict().entries) {
        if (k.any_untrusted() || untrusted_at(x, depth + 1)) return true;
      }
      return false;
    case Value::Kind::kNamespace:
      for (const auto& [k, x] : v.as_namespace().attrs.entries) {
        if (untrusted_at(x, depth + 1)) return true;
      }
      return false;
    default:
      return false;
  }
}

}  // namespace

bool contains_untrusted(const Value& v) {
  return untrusted_at(v, 0);
}

}  // namespace ds::jinja
