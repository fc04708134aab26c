#include "coordinator/chat_template/methods.h"

#include <cctype>

#include "common/utf8.h"
#include "coordinator/chat_template/args.h"
#include "coordinator/chat_template/py_string.h"

namespace ds::jinja {

namespace {

// The first offset from `i` on whose code point is not (space = true) or is (space = false)
// Python whitespace.
size_t skip_py_space(std::string_view s, size_t i, bool space) {
  while (i < s.size()) {
    const utf8::Loose c = utf8::decode_loose(s, i);
    if (is_py_space(c.cp) != space) break;
    i += c.len;
  }
  return i;
}

}  // namespace

Value str_strip(const Text& s, const Value& chars, bool left, bool right) {
  std::string_view set_view;
  const std::string_view* set = nullptr;
  if (chars.is_string()) {
    set_view = chars.as_text().str();
    set = &set_view;
  } else if (!chars.is_undefined() && !chars.is_none()) {
    throw EvalError("strip arg must be None or str");
  }
  const auto [b, e] = py_strip_bounds(s.str(), set, left, right);
  return Value::string(s.slice(b, e - b));
}

Value str_split(const Text& s, const Value& sep, int64_t maxsplit) {
  const std::string& str = s.str();
  List parts;
  if (sep.is_undefined() || sep.is_none()) {
    // Python split(): runs of whitespace separate, no empty strings.
    size_t i = 0;
    while (i < str.size()) {
      i = skip_py_space(str, i, true);
      if (i >= str.size()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
        parts.push_back(Value::string(s.slice(i, str.size() - i)));  // trailing space kept
        break;
      }
      const size_t b = i;
      i = skip_py_space(str, i, false);
      parts.push_back(Value::string(s.slice(b, i - b)));
    }
    return Value::list(std::move(parts));
  }
  if (!sep.is_string()) throw EvalError("split(): separator must be a string");
  const std::string& d = sep.as_text().str();
  if (d.empty()) throw EvalError("split(): empty separator");
  size_t b = 0;
  for (size_t at;
       (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) && (at = str.find(d, b)) != std::string::npos;
       b = at + d.size()) {
    parts.push_back(Value::string(s.slice(b, at - b)));
  }
  parts.push_back(Value::string(s.slice(b, str.size() - b)));
  return Value::list(std::move(parts));
}

Value str_replace(const Text& s, const Text& old_s, const Text& new_s, int64_t count) {
  const std::string& str = s.str();
  const std::string& o = old_s.str();
  std::string out;
  size_t b = 0;
  int64_t done = 0;
  if (o.empty()) {
    // Python inserts `new` between every character (and at both ends).
    const std::vector<size_t> cuts = utf8::boundaries_loose(str);
    for (size_t i = 0; i < cuts.size(); ++i) {
      if (count < 0 || done < count) {
        out += new_s.str();
        ++done;
      }
      if (i + 1 < cuts.size()) out.append(str, cuts[i], cuts[i + 1] - cuts[i]);
    }
  } else {
    for (size_t at; (count < 0 || done < count) && (at = str.find(o, b)) != std::string::npos; b = at + o.size()) {
      out.append(str, b, at - b);
      out += new_s.str();
      ++done;
    }
    out.append(str, b, std::string::npos);
  }
  // A rewrite mixes bytes: conservatively untrusted when any input was.
  return Value::string(
      Text::derived(std::move(out), s.any_untrusted() || old_s.any_untrusted() || new_s.any_untrusted()));
}

Value str_case(const Text& s, char mode) {
  std::string out = s.str();
  bool word_start = true;
  for (size_t i = 0; i < out.size(); ++i) {
    auto c = static_cast<unsigned char>(out[i]);
    bool up = mode == 'u';
    if (mode == 't') up = word_start;
    if (mode == 'c') up = i == 0;
    out[i] = static_cast<char>(up ? std::toupper(c) : std::tolower(c));  // ASCII only
    word_start = !std::isalpha(c);
  }
  return Value::string(Text::derived(std::move(out), s.any_untrusted()));
}

Value dict_items(const Dict& d) {
  List items;
  for (const auto& [k, v] : d.entries) items.push_back(Value::list({Value::string(k), v}));
  return Value::list(std::move(items));
}

namespace {

bool affix_match(const Value& self, const Value& arg, bool prefix) {
  const std::string& s = self.as_text().str();
  auto one = [&](const Value& a) {
    if (!a.is_string()) throw EvalError(std::string(prefix ? "startswith" : "endswith") + "(): expected a string");
    const std::string& p = a.as_text().str();
    if (p.size() > s.size()) return false;
    return prefix ? s.compare(0, p.size(), p) == 0 : s.compare(s.size() - p.size(), p.size(), p) == 0;
  };
  if (arg.is_list()) {
    for (const Value& a : arg.as_list()) {
      if (one(a)) return true;
    }
    return false;
  }
  return one(arg);
}

Value str_join(const Text& sep, const Value& items) {
  Text out;
  bool first = true;
  for (const Value& v : items.is_list() ? items.as_list() : List{}) {
    if (!first) out.append(sep);
    if (!v.is_string()) throw EvalError("join(): sequence item is not a string");
    out.append(v.as_text());
    first = false;
  }
  return Value::string(std::move(out));
}

int64_t str_find(const Text& s, const Text& sub, bool count) {
  const std::string& str = s.str();
  const std::string& p = sub.str();
  if (!count) {
    const size_t at = str.find(p);
    return at == std::string::npos ? -1 : static_cast<int64_t>(utf8::length_loose(std::string_view(str).substr(0, at)));
  }
  if (p.empty()) return static_cast<int64_t>(utf8::length_loose(str)) + 1;
  int64_t n = 0;
  for (size_t at = str.find(p); at != std::string::npos; at = str.find(p, at + p.size())) ++n;
  return n;
}

Value string_method(const Value& self, const std::string& name) {
  const Text s = self.as_text();
  auto fn = [&](std::function<Value(const CallArgs&)> f) {
    return Value::callable(name, [f = std::move(f)](CallArgs& a) { return f(a); });
  };
  if (name == "startswith" || name == "endswith") {
    const bool prefix = name == "startswith";
    return fn([self, prefix, name](const CallArgs& a) {
      ArgReader r(name, a, {"prefix"});
      return Value::boolean(affix_match(self, r[0], prefix));
    });
  }
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    const bool l = name != "rstrip";
    const bool rt = name != "lstrip";
    return fn([s, l, rt, name](const CallArgs& a) { return str_strip(s, ArgReader(name, a, {"chars"})[0], l, rt); });
  }
  if (name == "split") {
    return fn([s](const CallArgs& a) {
      ArgReader r("split", a, {"sep", "maxsplit"});
      return str_split(s, r[0], r.integer(1, "split", -1));
    });
  }
  if (name == "replace") {
    return fn([s](const CallArgs& a) {
      ArgReader r("replace", a, {"old", "new", "count"});
      return str_replace(s, r.text(0, "replace"), r.text(1, "replace"), r.integer(2, "replace", -1));
    });
  }
  static const std::pair<const char*, char> kCases[] = {
      {"upper", 'u'}, {"lower", 'l'}, {"title", 't'}, {"capitalize", 'c'}};
  for (const auto& [n, mode] : kCases) {
    if (name == n) {
      return fn([s, mode = mode, n = n](const CallArgs& a) {
        ArgReader(n, a, {});
        return str_case(s, mode);
      });
    }
  }
  if (name == "find" || name == "count") {
    const bool count = name == "count";
    return fn([s, count, name](const CallArgs& a) {
      return Value::integer(str_find(s, ArgReader(name, a, {"sub"}).text(0, name), count));
    });
  }
  if (name == "join") {
    return fn([s](const CallArgs& a) { return str_join(s, ArgReader("join", a, {"iterable"})[0]); });
  }
  return {};
}

Value dict_method(const Value& self, const std::string& name) {
  if (name == "get") {
    return Value::callable(name, [self](CallArgs& a) {
      ArgReader r("get", a, {"key", "default"});
      const Value* v = r[0].is_string() ? self.as_dict().find(r[0].as_text().str()) : nullptr;
      if (v) return *v;
      return r.has(1) ? r[1] : Value::none();
    });
  }
  if (name == "items" || name == "keys" || name == "values") {
    return Value::callable(name, [self, name](CallArgs& a) {
      ArgReader(name, a, {});
      if (name == "items") return dict_items(self.as_dict());
      List out;
      for (const auto& [k, v] : self.as_dict().entries) out.push_back(name == "keys" ? Value::string(k) : v);
      return Value::list(std::move(out));
    });
  }
  return {};
}

}  // namespace

Value bound_method(const Value& obj, const std::string& name) {
  if (obj.is_string()) return string_method(obj, name);
  if (obj.is_dict()) return dict_method(obj, name);
  return {};
}

}  // namespace ds::jinja
