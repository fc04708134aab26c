#include "coordinator/structured/schema_merge.h"

#include <algorithm>
#include <set>

#include "coordinator/structured/grammar.h"

namespace ds::structured {

namespace {

constexpr std::string_view kSupported[] = {"type",
                                           "enum",
                                           "const",
                                           "properties",
                                           "required",
                                           "additionalProperties",
                                           "patternProperties",
                                           "items",
                                           "prefixItems",
                                           "additionalItems",
                                           "minItems",
                                           "maxItems",
                                           "minLength",
                                           "maxLength",
                                           "pattern",
                                           "format",
                                           "minimum",
                                           "maximum",
                                           "exclusiveMinimum",
                                           "exclusiveMaximum",
                                           "anyOf",
                                           "oneOf",
                                           "allOf",
                                           "$ref",
                                           "nullable"};

constexpr std::string_view kRefused[] = {"not",
                                         "if",
                                         "then",
                                         "else",
                                         "uniqueItems",
                                         "multipleOf",
                                         "minProperties",
                                         "maxProperties",
                                         "dependencies",
                                         "dependentRequired",
                                         "dependentSchemas",
                                         "propertyNames",
                                         "contains",
                                         "minContains",
                                         "maxContains",
                                         "unevaluatedProperties",
                                         "unevaluatedItems",
                                         "$dynamicRef",
                                         "$recursiveRef"};

std::string_view sv(const JValue& v) {
  return {v.GetString(), v.GetStringLength()};
}

std::string unescape_pointer_token(std::string_view t) {
  std::string out;
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i] == '~' && i + 1 < t.size()) {
      out.push_back(t[i + 1] == '1' ? '/' : '~');
      ++i;
    } else if (t[i] == '%' && i + 2 < t.size()) {
      out.push_back(static_cast<char>(std::stoi(std::string(t.substr(i + 1, 2)), nullptr, 16)));
      i += 2;
    } else {
      out.push_back(t[i]);
    }
  }
  return out;
}

std::vector<std::string> type_list(const JValue& s) {
  std::vector<std::string> out;
  auto it = s.FindMember("type");
  if (it == s.MemberEnd()) return {"null", "boolean", "object", "array", "number", "string"};
  if (it->value.IsString()) {
    out.emplace_back(sv(it->value));
  } else if (it->value.IsArray()) {
    for (const auto& t : it->value.GetArray())
      if (t.IsString()) out.emplace_back(sv(t));
  }
  return out;
}

// not A and not B = not (A or B), kept only where the compiler can honour it: either one
// matches everything (then so does the union), or both are {type: ...} (types united).
JValue merge_not(const JValue& x, const JValue& y, rapidjson::Document::AllocatorType& a) {
  auto trivial = [](const JValue& v) { return (v.IsBool() && v.GetBool()) || (v.IsObject() && v.MemberCount() == 0); };
  if (trivial(x)) return JValue(x, a);
  if (trivial(y)) return JValue(y, a);
  auto type_only = [](const JValue& v) { return v.IsObject() && v.MemberCount() == 1 && v.HasMember("type"); };
  if (!type_only(x) || !type_only(y)) throw SchemaError("allOf", "cannot merge two different not");
  std::vector<std::string> ts = type_list(x);
  for (const auto& t : type_list(y))
    if (std::find(ts.begin(), ts.end(), t) == ts.end()) ts.push_back(t);
  JValue arr(rapidjson::kArrayType);
  for (const auto& t : ts) arr.PushBack(JValue(t.c_str(), a), a);
  JValue out(rapidjson::kObjectType);
  out.AddMember("type", std::move(arr), a);
  return out;
}

bool same_json(const JValue& a, const JValue& b) {
  return a == b;
}

// A schema every value satisfies, in its simplest spellings.
bool trivial(const JValue& v) {
  return (v.IsBool() && v.GetBool()) || (v.IsObject() && v.MemberCount() == 0);
}

// A non-empty patternProperties, or null.
const JValue* pp_of(const JValue& s) {
  auto it = s.FindMember("patternProperties");
  if (it == s.MemberEnd() || !it->value.IsObject() || it->value.MemberCount() == 0) return nullptr;
  return &it->value;
}

}  // namespace

bool is_supported_keyword(std::string_view k) {
  return std::find(std::begin(kSupported), std::end(kSupported), k) != std::end(kSupported);
}

bool is_refused_keyword(std::string_view k, const JValue& v) {
  if (std::find(std::begin(kRefused), std::end(kRefused), k) == std::end(kRefused)) return false;
  // Forms that constrain nothing.
  if (k == "uniqueItems" && v.IsBool() && !v.GetBool()) return false;
  if (k == "minProperties" && v.IsNumber() && v.GetDouble() <= 0) return false;
  if ((k == "dependencies" || k == "dependentRequired" || k == "dependentSchemas") && v.IsObject() &&
      v.MemberCount() == 0)
    return false;
  return true;
}

NumBounds num_bounds(const JValue& s) {
  NumBounds b;
  auto get = [&](const char* k) -> const JValue* {
    auto it = s.FindMember(k);
    return it == s.MemberEnd() ? nullptr : &it->value;
  };
  const JValue* mn = get("minimum");
  const JValue* mx = get("maximum");
  const JValue* emn = get("exclusiveMinimum");
  const JValue* emx = get("exclusiveMaximum");
  if (mn && mn->IsNumber()) b.lo = mn->GetDouble();
  if (mx && mx->IsNumber()) b.hi = mx->GetDouble();
  if (emn && emn->IsBool()) b.lo_excl = emn->GetBool() && b.lo.has_value();
  if (emx && emx->IsBool()) b.hi_excl = emx->GetBool() && b.hi.has_value();
  if (emn && emn->IsNumber() && (!b.lo || emn->GetDouble() >= *b.lo)) b.lo = emn->GetDouble(), b.lo_excl = true;
  if (emx && emx->IsNumber() && (!b.hi || emx->GetDouble() <= *b.hi)) b.hi = emx->GetDouble(), b.hi_excl = true;
  return b;
}

SchemaStore::SchemaStore(const JValue& root) : root_(root) {
  if (root.IsObject()) {
    for (const char* k : {"$id", "id"}) {
      auto it = root.FindMember(k);
      if (it != root.MemberEnd() && it->value.IsString()) {
        root_id_ = std::string(sv(it->value));
        break;
      }
    }
  }
  while (!root_id_.empty() && root_id_.back() == '#') root_id_.pop_back();
}

const JValue& SchemaStore::resolve(std::string_view ref) const {
  std::string_view r = ref;
  if (!root_id_.empty() && r.substr(0, root_id_.size()) == root_id_) r.remove_prefix(root_id_.size());
  if (r.empty() || r[0] != '#') throw SchemaError("$ref", "only local references are supported: " + std::string(ref));
  r.remove_prefix(1);
  if (!r.empty() && r[0] != '/') throw SchemaError("$ref", "anchors are not supported: " + std::string(ref));
  const JValue* cur = &root_;
  while (!r.empty()) {
    r.remove_prefix(1);
    const size_t slash = r.find('/');
    const std::string tok = unescape_pointer_token(r.substr(0, slash));
    r = slash == std::string_view::npos ? std::string_view() : r.substr(slash);
    if (cur->IsObject()) {
      auto it = cur->FindMember(JValue(rapidjson::StringRef(tok.data(), tok.size())));
      if (it == cur->MemberEnd()) throw SchemaError("$ref", "unresolvable reference " + std::string(ref));
      cur = &it->value;
    } else if (cur->IsArray() && !tok.empty() && std::all_of(tok.begin(), tok.end(), ::isdigit)) {
      const size_t i = std::stoul(tok);
      if (i >= cur->Size()) throw SchemaError("$ref", "unresolvable reference " + std::string(ref));
      cur = &(*cur)[static_cast<rapidjson::SizeType>(i)];
    } else {
      throw SchemaError("$ref", "unresolvable reference " + std::string(ref));
    }
  }
  return *cur;
}

const JValue& SchemaStore::keep(JValue v) {
  store_.push_back(std::move(v));
  return store_.back();
}

const JValue& SchemaStore::without(const JValue& s, std::initializer_list<std::string_view> drop) {
  JValue out(rapidjson::kObjectType);
  for (const auto& m : s.GetObject()) {
    if (std::find(drop.begin(), drop.end(), sv(m.name)) != drop.end()) continue;
    out.AddMember(JValue(m.name, alloc()), JValue(m.value, alloc()), alloc());
  }
  return keep(std::move(out));
}

void SchemaStore::flatten(const JValue& s, std::vector<const JValue*>& out, bool& is_false, int depth) {
  if (depth > 32) throw SchemaError("allOf", "allOf / $ref nesting too deep to merge");
  if (s.IsBool()) {
    if (!s.GetBool()) is_false = true;
    return;
  }
  if (!s.IsObject()) throw SchemaError("allOf", "a subschema is not an object");
  auto ref = s.FindMember("$ref");
  if (ref != s.MemberEnd() && ref->value.IsString()) {
    flatten(resolve(sv(ref->value)), out, is_false, depth + 1);
    flatten(without(s, {"$ref"}), out, is_false, depth + 1);
    return;
  }
  auto all = s.FindMember("allOf");
  if (all != s.MemberEnd() && all->value.IsArray()) {
    for (const auto& b : all->value.GetArray()) flatten(b, out, is_false, depth + 1);
    flatten(without(s, {"allOf"}), out, is_false, depth + 1);
    return;
  }
  out.push_back(&s);
}

const JValue& SchemaStore::merge(const std::vector<const JValue*>& parts) {
  std::vector<const JValue*> ss;
  bool is_false = false;
  for (const JValue* p : parts) flatten(*p, ss, is_false, 0);
  if (is_false) return keep(JValue(false));
  auto& a = alloc();
  JValue out(rapidjson::kObjectType);
  auto add = [&](const char* k, JValue v) { out.AddMember(JValue(k, a), std::move(v), a); };
  auto all_of = [&](const std::vector<const JValue*>& vs) {
    if (vs.size() == 1) return JValue(*vs[0], a);
    JValue arr(rapidjson::kArrayType);
    for (const JValue* v : vs) arr.PushBack(JValue(*v, a), a);
    JValue o(rapidjson::kObjectType);
    o.AddMember("allOf", std::move(arr), a);
    return o;
  };

  // type: intersection ("number" includes "integer").
  static const std::vector<std::string> kAll = {"null", "boolean", "object", "array", "number", "integer", "string"};
  std::set<std::string> types(kAll.begin(), kAll.end());
  bool typed = false;
  for (const JValue* s : ss) {
    if (!s->HasMember("type")) continue;
    typed = true;
    std::vector<std::string> tl = type_list(*s);
    std::set<std::string> t(tl.begin(), tl.end());
    if (t.count("any")) continue;
    if (t.count("number")) t.insert("integer");
    std::set<std::string> inter;
    for (const auto& x : types)
      if (t.count(x)) inter.insert(x);
    types = inter;
  }
  if (typed) {
    JValue arr(rapidjson::kArrayType);
    for (const auto& t : kAll)
      if (types.count(t) && !(t == "integer" && types.count("number"))) arr.PushBack(JValue(t.c_str(), a), a);
    add("type", std::move(arr));
  }

  // properties / additionalProperties / required.
  std::vector<std::string> names;
  for (const JValue* s : ss) {
    auto p = s->FindMember("properties");
    if (p != s->MemberEnd() && p->value.IsObject())
      for (const auto& m : p->value.GetObject())
        if (std::find(names.begin(), names.end(), sv(m.name)) == names.end()) names.emplace_back(sv(m.name));
  }
  if (!names.empty()) {
    JValue props(rapidjson::kObjectType);
    for (const auto& n : names) {
      std::vector<const JValue*> vs;
      for (const JValue* s : ss) {
        auto p = s->FindMember("properties");
        const bool has_props = p != s->MemberEnd() && p->value.IsObject();
        auto m = has_props ? p->value.FindMember(n.c_str()) : JValue::ConstMemberIterator();
        if (has_props && m != p->value.MemberEnd()) {
          vs.push_back(&m->value);
        } else if (auto ap = s->FindMember("additionalProperties"); ap != s->MemberEnd() && !trivial(ap->value)) {
          if (pp_of(*s))
            throw SchemaError("patternProperties", "additionalProperties with patternProperties in a merged branch");
          vs.push_back(&ap->value);
        }
      }
      props.AddMember(JValue(n.c_str(), a), all_of(vs), a);
    }
    add("properties", std::move(props));
  }
  // patternProperties: the union (a pattern in several branches: allOf of its schemas). Exact
  // unless another branch has a pattern that a branch with a constraining additionalProperties
  // lacks (that branch's extra keys would then be judged by the other branch's pattern).
  bool any_pp = false;
  for (const JValue* s : ss) any_pp = any_pp || pp_of(*s);
  if (any_pp) {
    const JValue empty(rapidjson::kObjectType);
    auto pats = [&](const JValue* s) -> const JValue& { return pp_of(*s) ? *pp_of(*s) : empty; };
    for (const JValue* s : ss) {
      auto ap = s->FindMember("additionalProperties");
      if (ap == s->MemberEnd() || trivial(ap->value)) continue;
      for (const JValue* o : ss)
        for (const auto& m : pats(o).GetObject())
          if (!pats(s).HasMember(m.name))
            throw SchemaError("patternProperties",
                              "additionalProperties of one branch with patternProperties of another");
    }
    std::vector<std::string> pnames;
    for (const JValue* s : ss)
      for (const auto& m : pats(s).GetObject())
        if (std::find(pnames.begin(), pnames.end(), sv(m.name)) == pnames.end()) pnames.emplace_back(sv(m.name));
    JValue pp(rapidjson::kObjectType);
    for (const auto& n : pnames) {
      std::vector<const JValue*> vs;
      for (const JValue* s : ss)
        if (auto m = pats(s).FindMember(n.c_str()); m != pats(s).MemberEnd()) vs.push_back(&m->value);
      pp.AddMember(JValue(n.c_str(), a), all_of(vs), a);
    }
    add("patternProperties", std::move(pp));
  }
  std::vector<const JValue*> addl;
  std::vector<std::string> required;
  for (const JValue* s : ss) {
    if (auto ap = s->FindMember("additionalProperties"); ap != s->MemberEnd() && !trivial(ap->value))
      addl.push_back(&ap->value);
    if (auto rq = s->FindMember("required"); rq != s->MemberEnd() && rq->value.IsArray())
      for (const auto& r : rq->value.GetArray())
        if (r.IsString() && std::find(required.begin(), required.end(), sv(r)) == required.end())
          required.emplace_back(sv(r));
  }
  if (!addl.empty()) add("additionalProperties", all_of(addl));
  if (!required.empty()) {
    JValue arr(rapidjson::kArrayType);
    for (const auto& r : required) arr.PushBack(JValue(r.c_str(), a), a);
    add("required", std::move(arr));
  }

  // Numeric bounds: the stricter of each.
  NumBounds nb;
  for (const JValue* s : ss) {
    const NumBounds b = num_bounds(*s);
    if (b.lo && (!nb.lo || *b.lo > *nb.lo || (*b.lo == *nb.lo && b.lo_excl))) nb.lo = b.lo, nb.lo_excl = b.lo_excl;
    if (b.hi && (!nb.hi || *b.hi < *nb.hi || (*b.hi == *nb.hi && b.hi_excl))) nb.hi = b.hi, nb.hi_excl = b.hi_excl;
  }
  if (nb.lo) add(nb.lo_excl ? "exclusiveMinimum" : "minimum", JValue(*nb.lo));
  if (nb.hi) add(nb.hi_excl ? "exclusiveMaximum" : "maximum", JValue(*nb.hi));
  for (const char* k : {"minLength", "minItems"}) {
    std::optional<uint64_t> v;
    for (const JValue* s : ss)
      if (auto it = s->FindMember(k); it != s->MemberEnd() && it->value.IsNumber())
        v = std::max<uint64_t>(v.value_or(0), static_cast<uint64_t>(it->value.GetDouble()));
    if (v) add(k, JValue(*v));
  }
  for (const char* k : {"maxLength", "maxItems"}) {
    std::optional<uint64_t> v;
    for (const JValue* s : ss)
      if (auto it = s->FindMember(k); it != s->MemberEnd() && it->value.IsNumber())
        v = std::min<uint64_t>(v.value_or(UINT64_MAX), static_cast<uint64_t>(it->value.GetDouble()));
    if (v) add(k, JValue(*v));
  }

  // enum / const: intersection.
  std::optional<std::vector<const JValue*>> values;
  for (const JValue* s : ss) {
    std::vector<const JValue*> vs;
    bool has = false;
    if (auto it = s->FindMember("const"); it != s->MemberEnd()) has = true, vs.push_back(&it->value);
    if (auto it = s->FindMember("enum"); it != s->MemberEnd() && it->value.IsArray()) {
      has = true;
      std::vector<const JValue*> e;
      for (const auto& v : it->value.GetArray())
        if (vs.empty() || same_json(v, *vs[0])) e.push_back(&v);
      vs = e;
    }
    if (!has) continue;
    if (!values) {
      values = vs;
    } else {
      std::vector<const JValue*> inter;
      for (const JValue* v : *values)
        for (const JValue* w : vs)
          if (same_json(*v, *w)) inter.push_back(v);
      values = inter;
    }
  }
  if (values) {
    JValue arr(rapidjson::kArrayType);
    for (const JValue* v : *values) arr.PushBack(JValue(*v, a), a);
    add("enum", std::move(arr));
  }

  // items: allOf of the schema forms.
  std::vector<const JValue*> items;
  for (const JValue* s : ss)
    if (auto it = s->FindMember("items"); it != s->MemberEnd()) {
      if (it->value.IsArray()) throw SchemaError("allOf", "tuple items in a merged branch");
      items.push_back(&it->value);
    }
  if (!items.empty()) add("items", all_of(items));

  // Keywords taken from the single branch that has them (or equal in all).
  static const char* kSingle[] = {"pattern", "format", "anyOf", "oneOf", "prefixItems", "additionalItems", "nullable"};
  for (const char* k : kSingle) {
    const JValue* v = nullptr;
    for (const JValue* s : ss)
      if (auto it = s->FindMember(k); it != s->MemberEnd()) {
        if (v && !same_json(*v, it->value)) throw SchemaError("allOf", std::string("cannot merge two different ") + k);
        v = &it->value;
      }
    if (v) add(k, JValue(*v, a));
  }
  // Refused keywords are carried so that the compiler names them. "not" is honoured in simple
  // forms, so two different ones cannot be folded into one.
  for (const JValue* s : ss)
    for (const auto& m : s->GetObject()) {
      if (!is_refused_keyword(sv(m.name), m.value)) continue;
      if (auto it = out.FindMember(m.name); it != out.MemberEnd()) {
        if (sv(m.name) == "not" && !same_json(it->value, m.value)) it->value = merge_not(it->value, m.value, a);
        continue;
      }
      out.AddMember(JValue(m.name, a), JValue(m.value, a), a);
    }
  return keep(std::move(out));
}

}  // namespace ds::structured
