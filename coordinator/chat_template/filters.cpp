// Filter implementations. Provenance rules: filters that only select or concatenate bytes
// (trim, first, join, list, reverse) keep per-byte provenance; filters that rewrite text
// (upper, replace, tojson of data) yield untrusted output when any input byte was untrusted.
#include <algorithm>
#include <cmath>
#include <map>

#include "coordinator/chat_template/args.h"
#include "coordinator/chat_template/builtins.h"
#include "coordinator/chat_template/json.h"
#include "coordinator/chat_template/methods.h"
#include "coordinator/chat_template/value_ops.h"

namespace ds::jinja {
namespace {

Value f_tojson(const Value& v, const CallArgs& a, const Limits&) {
  ArgReader r("tojson", a, {"indent", "ensure_ascii", "separators", "sort_keys"});
  JsonDumpOptions o;
  if (r.has(0) && !r[0].is_none()) {
    if (r[0].is_int()) {
      o.indent = static_cast<int>(std::clamp<int64_t>(r[0].as_int(), 0, 64));
    } else {
      throw EvalError("tojson(): indent must be an integer");
    }
    o.item_sep = ",";
  }
  if (r.has(1)) o.ensure_ascii = r[1].truthy();
  if (r.has(2) && !r[2].is_none()) {
    if (!r[2].is_list() || r[2].as_list().size() != 2 || !r[2].as_list()[0].is_string() ||
        !r[2].as_list()[1].is_string()) {
      throw EvalError("tojson(): separators must be a pair of strings");
    }
    o.item_sep = r[2].as_list()[0].as_text().str();
    o.key_sep = r[2].as_list()[1].as_text().str();
  }
  if (r.has(3)) o.sort_keys = r[3].truthy();
  return Value::string(to_json(v, o));
}

const Text& need_text(const Value& v, const char* f) {
  if (!v.is_string()) throw EvalError(std::string(f) + ": expected a string, got " + v.type_name());
  return v.as_text();
}

Value f_trim(const Value& v, const CallArgs& a, const Limits&) {
  const Value s = v.is_string() ? v : Value::string(to_text(v));
  return str_strip(s.as_text(), ArgReader("trim", a, {"chars"})[0], true, true);
}

Value f_items(const Value& v, const CallArgs& a, const Limits&) {
  ArgReader("items", a, {});
  if (v.is_undefined()) return Value::list();
  if (v.is_dict()) return dict_items(v.as_dict());
  if (v.is_namespace()) return dict_items(v.as_namespace().attrs);
  throw EvalError(std::string("items: can only get item pairs from a mapping, got ") + v.type_name());
}

Value f_length(const Value& v, const CallArgs& a, const Limits&) {
  ArgReader("length", a, {});
  return Value::integer(length_of(v));
}

Value f_string(const Value& v, const CallArgs& a, const Limits&) {
  ArgReader("string", a, {});
  return Value::string(to_text(v));
}

Value f_safe(const Value& v, const CallArgs& a, const Limits&) {
  ArgReader("safe", a, {});
  return v;
}

Value f_default(const Value& v, const CallArgs& a, const Limits&) {
  ArgReader r("default", a, {"default_value", "boolean"});
  const bool use_default = r[1].truthy() ? !v.truthy() : v.is_undefined();
  if (!use_default) return v;
  return r.has(0) ? r[0] : Value::trusted("");
}

Value attribute_of(const Value& item, const Value& attr) {
  if (attr.is_undefined() || attr.is_none()) return item;
  Value cur = item;
  // Dotted paths ("function.name") as in Jinja's make_attrgetter.
  const Value parts = str_split(need_text(attr, "attribute"), Value::trusted("."), -1);
  for (const Value& part : parts.as_list()) {
    cur = get_item(cur, part);
  }
  return cur;
}

Value f_join(const Value& v, const CallArgs& a, const Limits& lim) {
  ArgReader r("join", a, {"d", "attribute"});
  const Text sep = r.has(0) ? to_text(r[0]) : Text();
  Text out;
  bool first = true;
  for (const Value& item : iteration_items(v)) {
    if (!first) out.append(sep);
    out.append(to_text(attribute_of(item, r[1])));
    if (out.size() > lim.max_output_bytes) throw EvalError("join: result too large");
    first = false;
  }
  return Value::string(std::move(out));
}

Value f_first(const Value& v, const CallArgs& a, const Limits&) {
  ArgReader("first", a, {});
  List items = iteration_items(v);
  return items.empty() ? Value() : items.front();
}

Value f_last(const Value& v, const CallArgs& a, const Limits&) {
  ArgReader("last", a, {});
  List items = iteration_items(v);
  return items.empty() ? Value() : items.back();
}

template <char kMode>
Value f_case(const Value& v, const CallArgs& a, const Limits&) {
  ArgReader("case filter", a, {});
  return str_case(to_text(v), kMode);
}

Value f_replace(const Value& v, const CallArgs& a, const Limits& lim) {
  ArgReader r("replace", a, {"old", "new", "count"});
  Value out =
      str_replace(to_text(v), need_text(r[0], "replace"), need_text(r[1], "replace"), r.integer(2, "replace", -1));
  if (out.as_text().size() > lim.max_output_bytes) throw EvalError("replace: result too large");
  return out;
}

Value f_list(const Value& v, const CallArgs& a, const Limits&) {
  ArgReader("list", a, {});
  return Value::list(iteration_items(v));
}

Value f_reverse(const Value& v, const CallArgs& a, const Limits&) {
  ArgReader("reverse", a, {});
  List items = iteration_items(v);
  std::reverse(items.begin(), items.end());
  if (!v.is_string()) return Value::list(std::move(items));
  Text out;
  for (const Value& c : items) out.append(c.as_text());
  return Value::string(std::move(out));
}

Value f_int(const Value& v, const CallArgs& a, const Limits&) {
  ArgReader r("int", a, {"default", "base"});
  const Value fallback = r.has(0) ? r[0] : Value::integer(0);
  if (v.is_int()) return v;
  if (v.is_bool()) return Value::integer(v.as_bool());
  if (v.is_float()) return std::isfinite(v.as_float()) ? Value::integer(static_cast<int64_t>(v.as_float())) : fallback;
  if (v.is_string()) {
    try {
      size_t used = 0;
      const std::string s = v.as_text().str();
      const int64_t x = std::stoll(s, &used, static_cast<int>(r.integer(1, "int", 10)));
      if (used == s.size()) return Value::integer(x);
    } catch (const std::exception&) {
    }
  }
  return fallback;
}

Value f_float(const Value& v, const CallArgs& a, const Limits&) {
  ArgReader r("float", a, {"default"});
  if (v.is_number()) return Value::number(v.to_double());
  if (v.is_string()) {
    try {
      size_t used = 0;
      const double d = std::stod(v.as_text().str(), &used);
      if (used == v.as_text().size()) return Value::number(d);
    } catch (const std::exception&) {
    }
  }
  return r.has(0) ? r[0] : Value::number(0.0);
}

Value f_abs(const Value& v, const CallArgs& a, const Limits&) {
  ArgReader("abs", a, {});
  if (v.is_float()) return Value::number(std::fabs(v.as_float()));
  const Value n = negate(v);
  return n.as_int() > 0 ? n : negate(n);
}

// select/reject/selectattr/rejectattr: keep items whose test result equals `keep`.
Value filter_items(const Value& v, const CallArgs& a, bool by_attr, bool keep) {
  CallArgs rest;
  size_t i = 0;
  Value attr;
  if (by_attr) {
    if (a.positional.empty()) throw EvalError("selectattr/rejectattr: missing attribute name");
    attr = a.positional[i++];
  }
  TestFn test = nullptr;
  if (i < a.positional.size()) {
    const Value& name = a.positional[i++];
    test = find_test(need_text(name, "select").str());
    if (test == nullptr) throw EvalError("no test named '" + name.as_text().str() + "'");
  }
  rest.positional.assign(a.positional.begin() + static_cast<std::ptrdiff_t>(i), a.positional.end());
  List out;
  for (const Value& item : iteration_items(v)) {
    const Value subject = by_attr ? attribute_of(item, attr) : item;
    const bool ok = test ? test(subject, rest) : subject.truthy();
    if (ok == keep) out.push_back(item);
  }
  return Value::list(std::move(out));
}

Value f_select(const Value& v, const CallArgs& a, const Limits&) {
  return filter_items(v, a, false, true);
}
Value f_reject(const Value& v, const CallArgs& a, const Limits&) {
  return filter_items(v, a, false, false);
}
Value f_selectattr(const Value& v, const CallArgs& a, const Limits&) {
  return filter_items(v, a, true, true);
}
Value f_rejectattr(const Value& v, const CallArgs& a, const Limits&) {
  return filter_items(v, a, true, false);
}

Value f_map(const Value& v, const CallArgs& a, const Limits& lim) {
  List out;
  const Value* attr = nullptr;
  for (const auto& [k, x] : a.named) {
    if (k == "attribute") attr = &x;
  }
  if (attr != nullptr) {
    for (const Value& item : iteration_items(v)) out.push_back(attribute_of(item, *attr));
    return Value::list(std::move(out));
  }
  if (a.positional.empty()) throw EvalError("map: expected a filter name or attribute=");
  const std::string name = need_text(a.positional[0], "map").str();
  FilterFn f = find_filter(name);
  if (f == nullptr || f == &f_map) throw EvalError("map: no filter named '" + name + "'");
  CallArgs rest;
  rest.positional.assign(a.positional.begin() + 1, a.positional.end());
  rest.named = a.named;
  for (const Value& item : iteration_items(v)) out.push_back(f(item, rest, lim));
  return Value::list(std::move(out));
}

const std::map<std::string_view, FilterFn>& filter_table() {
  static const std::map<std::string_view, FilterFn> kTable = {
      {"tojson", f_tojson},
      {"trim", f_trim},
      {"items", f_items},
      {"length", f_length},
      {"count", f_length},
      {"string", f_string},
      {"safe", f_safe},
      {"default", f_default},
      {"d", f_default},
      {"join", f_join},
      {"first", f_first},
      {"last", f_last},
      {"upper", f_case<'u'>},
      {"lower", f_case<'l'>},
      {"title", f_case<'t'>},
      {"capitalize", f_case<'c'>},
      {"replace", f_replace},
      {"list", f_list},
      {"reverse", f_reverse},
      {"int", f_int},
      {"float", f_float},
      {"abs", f_abs},
      {"select", f_select},
      {"reject", f_reject},
      {"selectattr", f_selectattr},
      {"rejectattr", f_rejectattr},
      {"map", f_map},
  };
  return kTable;
}

}  // namespace

FilterFn find_filter(std::string_view name) {
  const auto& t = filter_table();
  auto it = t.find(name);
  return it == t.end() ? nullptr : it->second;
}

}  // namespace ds::jinja
