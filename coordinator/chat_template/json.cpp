#include "coordinator/chat_template/json.h"

#include <algorithm>
#include <cmath>

#include "common/utf8.h"

namespace ds::jinja {

namespace {

Value from_json_at(const rapidjson::Value& json, int depth) {
  if (depth > 256) throw EvalError("JSON nested too deeply");
  switch (json.GetType()) {
    case rapidjson::kNullType:
      return Value::none();
    case rapidjson::kFalseType:
      return Value::boolean(false);
    case rapidjson::kTrueType:
      return Value::boolean(true);
    case rapidjson::kStringType:
      return Value::untrusted(std::string(json.GetString(), json.GetStringLength()));
    case rapidjson::kNumberType:
      if (json.IsInt64()) return Value::integer(json.GetInt64());
      return Value::number(json.GetDouble());
    case rapidjson::kArrayType: {
      List items;
      items.reserve(json.Size());
      for (const auto& e : json.GetArray()) items.push_back(from_json_at(e, depth + 1));
      return Value::list(std::move(items));
    }
    case rapidjson::kObjectType: {
      Value d = Value::dict();
      for (const auto& m : json.GetObject()) {
        d.as_dict().set(Text::untrusted(std::string(m.name.GetString(), m.name.GetStringLength())),
                        from_json_at(m.value, depth + 1));
      }
      return d;
    }
  }
  return Value::none();
}

}  // namespace

Value value_from_json(const rapidjson::Value& json) {
  return from_json_at(json, 0);
}

namespace {

void append_hex4(std::string& out, uint32_t u) {
  char b[16];
  std::snprintf(b, sizeof(b), "\\u%04x", u & 0xFFFFu);
  out += b;
}

void dump_string(std::string& out, const std::string& s, bool ensure_ascii) {
  out += '"';
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const utf8::Loose ch = utf8::decode_loose(s, i);
    const size_t n = ch.len;
    if ((c >= 0x80 || c == 0x7F) && ensure_ascii) {  // Python escapes everything outside ' '..'~'
      uint32_t cp = ch.cp;
      if (cp >= 0x10000) {
        cp -= 0x10000;
        append_hex4(out, 0xD800 + (cp >> 10));
        append_hex4(out, 0xDC00 + (cp & 0x3FF));
      } else {
        append_hex4(out, cp);
      }
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\b') {
      out += "\\b";
    } else if (c == '\f') {
      out += "\\f";
    } else if (c < 0x20) {
      append_hex4(out, c);
    } else {
      out.append(s, i, n);
    }
    i += n;
  }
  out += '"';
}

std::string json_float(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d < 0 ? "-Infinity" : "Infinity";
  return py_float_repr(d);
}

class Dumper {
 public:
  explicit Dumper(const JsonDumpOptions& o) : o_(o) {}
  std::string out;

  void dump(const Value& v, int level) {
    if (level > 512) throw EvalError("tojson: value nested too deeply");
    switch (v.kind()) {
      case Value::Kind::kNone:
        out += "null";
        return;
      case Value::Kind::kBool:
        out += v.as_bool() ? "true" : "false";
        return;
      case Value::Kind::kInt:
        out += std::to_string(v.as_int());
        return;
      case Value::Kind::kFloat:
        out += json_float(v.as_float());
        return;
      case Value::Kind::kString:
        dump_string(out, v.as_text().str(), o_.ensure_ascii);
        return;
      case Value::Kind::kList:
        dump_list(v.as_list(), level);
        return;
      case Value::Kind::kDict:
        dump_dict(v.as_dict(), level);
        return;
      case Value::Kind::kNamespace:
        dump_dict(v.as_namespace().attrs, level);
        return;
      default:
        throw EvalError(std::string("tojson: object of type ") + v.type_name() + " is not JSON serializable");
    }
  }

 private:
  void newline(int level) {
    if (o_.indent < 0) return;
    out += '\n';
    out.append(static_cast<size_t>(o_.indent) * static_cast<size_t>(level), ' ');
  }

  void dump_list(const List& l, int level) {
    if (l.empty()) {
      out += "[]";
      return;
    }
    out += '[';
    for (size_t i = 0; i < l.size(); ++i) {
      if (i) out += o_.item_sep;
      newline(level + 1);
      dump(l[i], level + 1);
    }
    newline(level);
    out += ']';
  }

  void dump_dict(const Dict& d, int level) {
    if (d.entries.empty()) {
      out += "{}";
      return;
    }
    std::vector<const std::pair<Text, Value>*> order;
    for (const auto& e : d.entries) order.push_back(&e);
    if (o_.sort_keys) {
      std::stable_sort(order.begin(), order.end(), [](auto* a, auto* b) { return a->first.str() < b->first.str(); });
    }
    out += '{';
    for (size_t i = 0; i < order.size(); ++i) {
      if (i) out += o_.item_sep;
      newline(level + 1);
      dump_string(out, order[i]->first.str(), o_.ensure_ascii);
      out += o_.key_sep;
      dump(order[i]->second, level + 1);
    }
    newline(level);
    out += '}';
  }

  const JsonDumpOptions& o_;
};

}  // namespace

Text to_json(const Value& v, const JsonDumpOptions& opts) {
  Dumper d(opts);
  d.dump(v, 0);
  return Text::derived(std::move(d.out), contains_untrusted(v));
}

}  // namespace ds::jinja
