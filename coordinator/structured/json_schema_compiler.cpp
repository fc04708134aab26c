#include "coordinator/structured/json_schema_compiler.h"

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <set>
#include <unordered_map>

#include "coordinator/structured/json_lexemes.h"
#include "coordinator/structured/regex.h"
#include "coordinator/structured/schema_merge.h"

namespace ds::structured {

namespace {

// Subset tracking of required properties: 2^R graph nodes.
constexpr size_t kMaxRequiredSet = 8;
// Arrays are unrolled item by item up to this many positions.
constexpr uint64_t kMaxUnroll = 2000;
constexpr uint64_t kMaxLength = 1 << 16;
// Arrays unrolled to at least this many positions take an item's leading whitespace into a rule.
constexpr uint64_t kMinSpacedItems = 8;

std::string_view sv(const JValue& v) {
  return {v.GetString(), v.GetStringLength()};
}

const JValue* member(const JValue& s, const char* k) {
  auto it = s.FindMember(k);
  return it == s.MemberEnd() ? nullptr : &it->value;
}

// Any JSON string with its quotes, determinised once per process.
std::shared_ptr<const Dfa> generic_string_dfa() {
  static const std::shared_ptr<const Dfa> d = [] {
    Budget b;
    return std::shared_ptr<const Dfa>(
        build_dfa(e_seq({e_byte('"'), e_rep(json_char(cp_all(), true), 0, kUnbounded), e_byte('"')}), b));
  }();
  return d;
}

const JValue& true_schema() {
  static const JValue v(true);
  return v;
}

std::string compact(const JValue& v) {
  rapidjson::StringBuffer sb;
  rapidjson::Writer<rapidjson::StringBuffer> w(sb);
  v.Accept(w);
  return std::string(sb.GetString(), sb.GetSize());
}

// JSON types named by the schema ("number" implies "integer").
std::set<std::string> types_of(const JValue& s) {
  std::set<std::string> all = {"null", "boolean", "object", "array", "number", "integer", "string"};
  const JValue* t = member(s, "type");
  std::set<std::string> out;
  if (!t) {
    out = all;
  } else if (t->IsString()) {
    out.insert(std::string(sv(*t)));
  } else if (t->IsArray()) {
    for (const auto& x : t->GetArray())
      if (x.IsString()) out.insert(std::string(sv(x)));
  } else {
    throw SchemaError("type", "type must be a string or an array");
  }
  if (out.count("any")) out = all;
  if (out.count("number")) out.insert("integer");
  if (const JValue* n = member(s, "nullable"); n && n->IsBool() && n->GetBool()) out.insert("null");
  return out;
}

bool value_has_type(const JValue& v, const std::set<std::string>& types) {
  if (v.IsNull()) return types.count("null");
  if (v.IsBool()) return types.count("boolean");
  if (v.IsString()) return types.count("string");
  if (v.IsObject()) return types.count("object");
  if (v.IsArray()) return types.count("array");
  if (types.count("number")) return true;
  if (!types.count("integer")) return false;
  if (v.IsInt64() || v.IsUint64()) return true;
  const double d = v.GetDouble();
  return std::floor(d) == d;
}

uint64_t count_kw(const JValue& s, const char* k, uint64_t dflt) {
  const JValue* v = member(s, k);
  if (!v) return dflt;
  if (!v->IsNumber() || v->GetDouble() < 0) throw SchemaError(k, "must be a non-negative number");
  const double d = v->GetDouble();
  return d > 1e18 ? UINT64_MAX : static_cast<uint64_t>(std::ceil(d));
}

class Compiler {
 public:
  Compiler(const JValue& root, const GrammarOptions& opt)
      : opt_(opt), own_(opt), b_(own_), store_(root), ws_(ws_expr(opt.max_ws)) {}
  // Rules go into `outer` (define_json_schema_rule); own_ stays unused.
  Compiler(GrammarBuilder& outer, const JValue& root, const GrammarOptions& opt)
      : opt_(opt), own_(opt), b_(outer), store_(root), ws_(ws_expr(opt.max_ws)) {}

  int32_t value_rule(const JValue& s) { return rule_for(s); }

  std::shared_ptr<const Grammar> compile_schema() {
    const int32_t root = rule_for(store_.root());
    return b_.finish(root);
  }
  std::shared_ptr<const Grammar> compile_any(bool object_only) {
    const int32_t root = any_rule();
    return b_.finish(object_only ? any_obj_ : root);
  }

 private:
  int32_t rule_for(const JValue& s) {
    auto it = rules_.find(&s);
    if (it != rules_.end()) return it->second;
    const int32_t r = b_.new_rule();
    rules_.emplace(&s, r);
    b_.define(r, expr_for(s));
    return r;
  }

  ExprPtr expr_for(const JValue& s) {
    if (++depth_ > 200) throw SchemaError("$ref", "schema nesting too deep");
    ExprPtr e = expr_for_inner(s);
    --depth_;
    return e;
  }

  // A schema every instance satisfies: true, or an object without validation keywords.
  static bool matches_everything(const JValue& s) {
    return s.IsBool() ? s.GetBool() : s.IsObject() && !has_validation_siblings(s, {});
  }

  static bool has_validation_siblings(const JValue& s, std::initializer_list<std::string_view> except) {
    for (const auto& m : s.GetObject()) {
      const std::string_view k = sv(m.name);
      if (std::find(except.begin(), except.end(), k) != except.end()) continue;
      if (is_validation_keyword(k, m.value)) return true;
    }
    return false;
  }

  ExprPtr expr_for_inner(const JValue& s) {
    if (s.IsBool()) return s.GetBool() ? e_call(any_rule()) : e_nothing();
    if (!s.IsObject()) throw SchemaError("schema", "a schema must be an object or a boolean");
    if (const JValue* ref = member(s, "$ref")) {
      if (!ref->IsString()) throw SchemaError("$ref", "$ref must be a string");
      const JValue& target = store_.resolve(sv(*ref));
      if (!has_validation_siblings(s, {"$ref"})) return e_call(rule_for(target));
      return expr_for(store_.merge({&s}));
    }
    if (member(s, "allOf")) return expr_for(store_.merge({&s}));
    const JValue* any = member(s, "anyOf");
    const JValue* one = member(s, "oneOf");
    if (any && one) throw SchemaError("oneOf", "anyOf together with oneOf");
    if (any || one) return union_expr(s, any ? *any : *one, any ? "anyOf" : "oneOf");
    const JValue* neg = member(s, "not");
    if (neg && matches_everything(*neg)) return e_nothing();
    for (const auto& m : s.GetObject())
      if (is_refused_keyword(sv(m.name), m.value) && sv(m.name) != "not")
        throw SchemaError(std::string(sv(m.name)), "keyword not supported");
    std::set<std::string> types = types_of(s);
    if (neg) {
      // not {type: ...}: those JSON types are removed. "Numbers that are not integers" has no
      // grammar here, so that one case stays refused.
      if (!neg->IsObject() || has_validation_siblings(*neg, {"type"}) || !neg->HasMember("type"))
        throw SchemaError("not", "only not {} and not {type: ...} are supported");
      const std::set<std::string> drop = types_of(*neg);
      if (drop.count("integer") && !drop.count("number") && types.count("number"))
        throw SchemaError("not", "not {type: integer} on numbers");
      for (const auto& t : drop) types.erase(t);
    }
    if (member(s, "enum") || member(s, "const")) return enum_expr(s, types);
    std::vector<ExprPtr> alts;
    if (types.count("null")) alts.push_back(e_lit("null"));
    if (types.count("boolean")) alts.push_back(e_alt({e_lit("true"), e_lit("false")}));
    if (types.count("number"))
      alts.push_back(number_for(s, false));
    else if (types.count("integer"))
      alts.push_back(number_for(s, true));
    if (types.count("string")) alts.push_back(string_for(s));
    if (types.count("object")) alts.push_back(object_for(s));
    if (types.count("array")) alts.push_back(array_for(s));
    return e_alt(std::move(alts));
  }

  // anyOf / oneOf. oneOf is compiled as anyOf when its branches are pairwise disjoint, so
  // that "exactly one" and "at least one" agree; otherwise it is refused.
  ExprPtr union_expr(const JValue& s, const JValue& branches, const char* kw) {
    if (!branches.IsArray() || branches.Empty()) throw SchemaError(kw, "must be a non-empty array");
    const bool siblings = has_validation_siblings(s, {"anyOf", "oneOf"});
    const JValue& rest = siblings ? store_.without(s, {"anyOf", "oneOf"}) : s;
    std::vector<const JValue*> parts;
    for (const auto& b : branches.GetArray()) parts.push_back(siblings ? &store_.merge({&rest, &b}) : &b);
    if (std::string_view(kw) == "oneOf") {
      std::vector<Shape> shapes;
      for (const JValue* p : parts) shapes.push_back(shape_of(*p));
      for (size_t i = 0; i < shapes.size(); ++i)
        for (size_t j = i + 1; j < shapes.size(); ++j)
          if (!disjoint(shapes[i], shapes[j]))
            throw SchemaError("oneOf", "branches " + std::to_string(i) + " and " + std::to_string(j) +
                                           " may both match (only disjoint oneOf branches are supported)");
    }
    std::vector<ExprPtr> alts;
    for (const JValue* p : parts) alts.push_back(siblings ? expr_for(*p) : e_call(rule_for(*p)));
    return e_alt(std::move(alts));
  }

  // What a oneOf branch can match, coarsely: its JSON types, its enum / const values, and for
  // objects the required names, property schemas and whether extra properties are banned.
  struct Shape {
    std::set<std::string> types;
    std::optional<std::vector<const JValue*>> values;
    const JValue* schema = nullptr;
    std::vector<std::string> required;
    bool closed = false;
  };

  const JValue& flat(const JValue& s) {
    if (s.IsObject() && (s.HasMember("$ref") || s.HasMember("allOf"))) return store_.merge({&s});
    return s;
  }

  Shape shape_of(const JValue& s0) {
    const JValue& s = flat(s0);
    Shape sh;
    if (s.IsBool()) {
      if (s.GetBool()) sh.types = types_of(JValue(rapidjson::kObjectType));
      return sh;
    }
    if (!s.IsObject()) return sh;
    sh.schema = &s;
    sh.types = types_of(s);
    std::vector<const JValue*> vals;
    if (const JValue* c = member(s, "const")) vals.push_back(c), sh.values = vals;
    if (const JValue* e = member(s, "enum"); e && e->IsArray() && !sh.values) {
      for (const auto& v : e->GetArray()) vals.push_back(&v);
      sh.values = vals;
    }
    if (sh.values) {
      std::set<std::string> t;
      for (const JValue* v : *sh.values)
        for (const char* ty : {"null", "boolean", "object", "array", "number", "integer", "string"})
          if (value_has_type(*v, {ty}) && sh.types.count(ty)) t.insert(ty);
      sh.types = t;
    }
    if (const JValue* r = member(s, "required"); r && r->IsArray())
      for (const auto& x : r->GetArray())
        if (x.IsString()) sh.required.emplace_back(sv(x));
    const JValue* ap = member(s, "additionalProperties");
    sh.closed = ap && ap->IsBool() && !ap->GetBool() && !s.HasMember("patternProperties");
    return sh;
  }

  const JValue* property(const Shape& sh, const std::string& name) {
    if (!sh.schema) return nullptr;
    const JValue* p = member(*sh.schema, "properties");
    if (!p || !p->IsObject()) return nullptr;
    auto it = p->FindMember(name.c_str());
    return it == p->MemberEnd() ? nullptr : &it->value;
  }

  static bool values_disjoint(const std::vector<const JValue*>& a, const std::vector<const JValue*>& b) {
    for (const JValue* x : a)
      for (const JValue* y : b)
        if (*x == *y) return false;
    return true;
  }

  bool disjoint(const Shape& a, const Shape& b) {
    std::set<std::string> common;
    for (const auto& t : a.types)
      if (b.types.count(t)) common.insert(t);
    if (common.empty()) return true;
    if (a.values && b.values && values_disjoint(*a.values, *b.values)) return true;
    if (common.size() != 1 || !common.count("object")) return false;
    for (const auto& r : a.required) {
      if (std::find(b.required.begin(), b.required.end(), r) == b.required.end()) {
        if (b.closed && !property(b, r)) return true;
        continue;
      }
      const JValue* pa = property(a, r);
      const JValue* pb = property(b, r);
      if (!pa || !pb) continue;
      const Shape sa = shape_of(*pa), sb = shape_of(*pb);
      if (disjoint(sa, sb)) return true;
    }
    for (const auto& r : b.required)
      if (a.closed && !property(a, r)) return true;
    return false;
  }

  ExprPtr enum_expr(const JValue& s, const std::set<std::string>& types) {
    std::vector<const JValue*> values;
    if (const JValue* c = member(s, "const")) {
      values.push_back(c);
    } else {
      const JValue* e = member(s, "enum");
      if (!e->IsArray()) throw SchemaError("enum", "enum must be an array");
      for (const auto& v : e->GetArray()) values.push_back(&v);
    }
    std::vector<ExprPtr> alts;
    for (const JValue* v : values)
      if (value_has_type(*v, types)) alts.push_back(literal(*v));
    return e_alt(std::move(alts));
  }

  // One JSON value, with flexible whitespace inside containers.
  ExprPtr literal(const JValue& v) {
    if (v.IsObject()) {
      std::vector<ExprPtr> seq{e_byte('{'), ws_};
      bool first = true;
      for (const auto& m : v.GetObject()) {
        if (!first) seq.insert(seq.end(), {ws_, e_byte(','), ws_});
        first = false;
        seq.insert(seq.end(), {e_lit(json_quote(sv(m.name))), ws_, e_byte(':'), ws_, literal(m.value)});
      }
      if (!first) seq.push_back(ws_);
      seq.push_back(e_byte('}'));
      return e_seq(std::move(seq));
    }
    if (v.IsArray()) {
      std::vector<ExprPtr> seq{e_byte('['), ws_};
      bool first = true;
      for (const auto& x : v.GetArray()) {
        if (!first) seq.insert(seq.end(), {ws_, e_byte(','), ws_});
        first = false;
        seq.push_back(literal(x));
      }
      if (!first) seq.push_back(ws_);
      seq.push_back(e_byte(']'));
      return e_seq(std::move(seq));
    }
    if (v.IsString()) return e_lit(json_quote(sv(v)));
    return e_lit(compact(v));
  }

  ExprPtr number_for(const JValue& s, bool integer) {
    const NumBounds nb = num_bounds(s);
    constexpr double kLim = 9.0e18;
    auto check = [&](const std::optional<double>& v, const char* kw) {
      if (v && std::fabs(*v) > kLim) throw SchemaError(kw, "bound out of range");
    };
    check(nb.lo, "minimum");
    check(nb.hi, "maximum");
    if (integer) {
      std::optional<int64_t> lo, hi;
      if (nb.lo) lo = static_cast<int64_t>(nb.lo_excl ? std::floor(*nb.lo) + 1 : std::ceil(*nb.lo));
      if (nb.hi) hi = static_cast<int64_t>(nb.hi_excl ? std::ceil(*nb.hi) - 1 : std::floor(*nb.hi));
      if (!lo && !hi) return e_call(shared_rule(integer_rule_, integer_expr()));
      if (lo && hi && *lo > *hi) return e_nothing();
      return integer_range_expr(lo, hi);
    }
    if (!nb.lo && !nb.hi) return e_call(shared_rule(number_rule_, number_expr()));
    if (nb.lo && std::floor(*nb.lo) != *nb.lo) throw SchemaError("minimum", "fractional bound on a number");
    if (nb.hi && std::floor(*nb.hi) != *nb.hi) throw SchemaError("maximum", "fractional bound on a number");
    std::optional<int64_t> lo, hi;
    if (nb.lo) lo = static_cast<int64_t>(*nb.lo);
    if (nb.hi) hi = static_cast<int64_t>(*nb.hi);
    return number_range_expr(lo, nb.lo_excl, hi, nb.hi_excl, b_.budget());
  }

  const Dfa& one_char() {
    if (!one_char_) one_char_ = build_dfa(json_char(cp_all(), true), b_.budget());
    return *one_char_;
  }

  ExprPtr string_for(const JValue& s) {
    // Equal string constraints share one rule (their DFA is built once).
    std::string key;
    for (const char* k : {"format", "pattern", "minLength", "maxLength"})
      if (const JValue* v = member(s, k)) key += std::string(k) + "=" + compact(*v) + ";";
    if (auto it = string_rules_.find(key); it != string_rules_.end()) return e_call(it->second);
    std::vector<std::shared_ptr<const Dfa>> parts;
    if (const JValue* f = member(s, "format"); f && f->IsString()) {
      std::string pat;
      switch (format_pattern(sv(*f), pat)) {
        case FormatSupport::Enforced:
          parts.push_back(json_content_dfa(pat, b_.budget()));
          break;
        case FormatSupport::Refused:
          throw SchemaError("format", "format \"" + std::string(sv(*f)) + "\" is not supported");
        case FormatSupport::Ignored:
          break;
      }
    }
    if (const JValue* p = member(s, "pattern")) {
      if (!p->IsString()) throw SchemaError("pattern", "pattern must be a string");
      try {
        parts.push_back(json_content_dfa(sv(*p), b_.budget()));
      } catch (const std::invalid_argument& e) {
        throw SchemaError("pattern", e.what());
      }
    }
    const uint64_t mn = count_kw(s, "minLength", 0);
    const uint64_t mx = count_kw(s, "maxLength", UINT64_MAX);
    if (mn > mx) return e_nothing();
    if (mn > 0 || mx != UINT64_MAX) {
      if (mn > kMaxLength) throw SchemaError("minLength", "too large");
      if (mx != UINT64_MAX && mx > kMaxLength) throw SchemaError("maxLength", "too large");
      parts.push_back(length_dfa(one_char(), static_cast<uint32_t>(mn),
                                 mx == UINT64_MAX ? kUnbounded : static_cast<uint32_t>(mx), b_.budget()));
    }
    if (parts.empty()) return e_call(shared_rule(string_rule_, e_embed(any_string())));
    std::shared_ptr<const Dfa> d = parts[0];
    for (size_t i = 1; i < parts.size(); ++i) d = dfa_product(*d, *parts[i], ProductMode::And, b_.budget());
    // A rule of its own: every position inside the string is one grammar state, whatever
    // property it belongs to, so its mask is computed once.
    const int32_t r = b_.new_rule();
    std::shared_ptr<const Dfa> quoted = dfa_wrap(*d, '"', '"', b_.budget());
    if (!quoted) quoted = build_dfa(e_seq({e_byte('"'), e_embed(d), e_byte('"')}), b_.budget());
    b_.define(r, e_embed(allowed_strings(std::move(quoted))));
    string_rules_.emplace(std::move(key), r);
    return e_call(r);
  }

  // ws "key" ws : ws value ws, as a rule of its own (members are symbols of the object
  // automaton). The whitespace around a member is the member's, not the object's: the object
  // automaton has a copy of everything between two members for every set of members seen (up to
  // 256), so what moves into the member rule is compiled (and its masks computed) once instead.
  int32_t member_rule(ExprPtr key, const JValue& value_schema) {
    const int32_t r = b_.new_rule();
    b_.define(r, e_seq({ws_, std::move(key), ws_, e_byte(':'), ws_, e_call(rule_for(value_schema)), ws_}));
    return r;
  }

  // ws value: an array item after "[" or ",", for the same reason (a copy per unrolled position).
  int32_t spaced_item_rule(const JValue& item_schema) {
    auto it = spaced_items_.find(&item_schema);
    if (it != spaced_items_.end()) return it->second;
    const int32_t r = b_.new_rule();
    spaced_items_.emplace(&item_schema, r);
    b_.define(r, e_seq({ws_, e_call(rule_for(item_schema))}));
    return r;
  }

  ExprPtr object_for(const JValue& s);
  std::vector<std::pair<std::shared_ptr<const Dfa>, const JValue*>> pattern_keys(const JValue& s);
  const JValue& all_of(std::vector<const JValue*> parts, const char* kw);
  ExprPtr array_for(const JValue& s);

  // A rule defined once per grammar (generic strings, numbers).
  int32_t shared_rule(int32_t& slot, const ExprPtr& e) {
    if (slot < 0) {
      slot = b_.new_rule();
      b_.define(slot, e);
    }
    return slot;
  }

  // `quoted` (a JSON string DFA, quotes included) without the strings that contain
  // opt_.forbid_in_strings; `quoted` itself when nothing is forbidden.
  std::shared_ptr<const Dfa> allowed_strings(std::shared_ptr<const Dfa> quoted) {
    if (opt_.forbid_in_strings.empty()) return quoted;
    if (!forbidden_) {
      ByteSet all;
      for (int c = 0; c < 256; ++c) all.set(static_cast<uint8_t>(c));
      const ExprPtr any = e_rep(e_bytes(all), 0, kUnbounded);
      forbidden_ = build_dfa(e_seq({any, e_lit(opt_.forbid_in_strings), any}), b_.budget());
    }
    return dfa_product(*quoted, *forbidden_, ProductMode::AndNot, b_.budget());
  }
  // Any JSON string, as allowed_strings leaves it (built once per compile).
  std::shared_ptr<const Dfa> any_string() {
    if (!any_string_) any_string_ = allowed_strings(generic_string_dfa());
    return any_string_;
  }

  int32_t any_rule() {
    if (any_rule_ >= 0) return any_rule_;
    any_rule_ = b_.new_rule();
    any_obj_ = b_.new_rule();
    const int32_t any_arr = b_.new_rule();
    const ExprPtr str = e_embed(any_string());
    b_.define(any_rule_,
              e_alt({e_lit("null"), e_lit("true"), e_lit("false"), e_call(shared_rule(number_rule_, number_expr())),
                     e_call(shared_rule(string_rule_, str)), e_call(any_obj_), e_call(any_arr)}));
    const ExprPtr mem = e_seq({str, ws_, e_byte(':'), ws_, e_call(any_rule_)});
    b_.define(any_obj_, container('{', '}', mem));
    b_.define(any_arr, container('[', ']', e_call(any_rule_)));
    return any_rule_;
  }

  // open ws ( close | item (ws , ws item)* ws close )
  ExprPtr container(char open, char close, const ExprPtr& item) {
    const ExprPtr more = e_rep(e_seq({ws_, e_byte(','), ws_, item}), 0, kUnbounded);
    return e_seq(
        {e_byte(static_cast<uint8_t>(open)), ws_,
         e_alt({e_byte(static_cast<uint8_t>(close)), e_seq({item, more, ws_, e_byte(static_cast<uint8_t>(close))})})});
  }

  GrammarOptions opt_;
  GrammarBuilder own_;
  GrammarBuilder& b_;
  SchemaStore store_;
  ExprPtr ws_;
  std::unordered_map<const JValue*, int32_t> rules_;
  std::unordered_map<const JValue*, int32_t> spaced_items_;  // spaced_item_rule's rules
  int32_t any_rule_ = -1, any_obj_ = -1;
  int32_t string_rule_ = -1, number_rule_ = -1, integer_rule_ = -1;
  std::shared_ptr<Dfa> one_char_;
  std::shared_ptr<const Dfa> forbidden_, any_string_;      // allowed_strings' automata
  std::unordered_map<std::string, int32_t> string_rules_;  // string_for's constraints -> rule
  int depth_ = 0;
};

// patternProperties: keys are matched on their JSON (canonical) spelling, with search semantics.
// Returns the quoted-key DFA of each pattern.
std::vector<std::pair<std::shared_ptr<const Dfa>, const JValue*>> Compiler::pattern_keys(const JValue& s) {
  std::vector<std::pair<std::shared_ptr<const Dfa>, const JValue*>> out;
  const JValue* pp = member(s, "patternProperties");
  if (!pp) return out;
  if (!pp->IsObject()) throw SchemaError("patternProperties", "must be an object");
  for (const auto& m : pp->GetObject()) {
    std::shared_ptr<const Dfa> content;
    try {
      content = json_content_dfa(sv(m.name), b_.budget());
    } catch (const std::invalid_argument& e) {
      throw SchemaError("patternProperties", e.what());
    }
    out.emplace_back(allowed_strings(build_dfa(e_seq({e_byte('"'), e_embed(content), e_byte('"')}), b_.budget())),
                     &m.value);
  }
  return out;
}

// allOf of `parts` (deduplicated; one part is returned as is). Refused naming `kw`.
const JValue& Compiler::all_of(std::vector<const JValue*> parts, const char* kw) {
  std::vector<const JValue*> uniq;
  for (const JValue* p : parts)
    if (std::none_of(uniq.begin(), uniq.end(), [&](const JValue* q) { return *q == *p; })) uniq.push_back(p);
  if (uniq.size() == 1) return *uniq[0];
  try {
    return store_.merge(uniq);
  } catch (const SchemaError& e) {
    throw SchemaError(kw, e.what());
  }
}

ExprPtr Compiler::object_for(const JValue& s) {
  std::vector<std::pair<std::string, const JValue*>> props;
  if (const JValue* p = member(s, "properties")) {
    if (!p->IsObject()) throw SchemaError("properties", "must be an object");
    for (const auto& m : p->GetObject()) props.emplace_back(std::string(sv(m.name)), &m.value);
  }
  const JValue* addl = member(s, "additionalProperties");
  const bool addl_false = addl && addl->IsBool() && !addl->GetBool();
  const auto pats = pattern_keys(s);
  // The pattern schemas a literal key must also satisfy.
  auto matching = [&](const std::string& name) {
    const std::string q = json_quote(name);
    std::vector<const JValue*> out;
    for (const auto& [dfa, schema] : pats) {
      int32_t st = dfa->size() ? 0 : -1;
      for (size_t i = 0; i < q.size() && st >= 0; ++i) st = dfa->step(st, static_cast<uint8_t>(q[i]));
      if (st >= 0 && dfa->accept[st]) out.push_back(schema);
    }
    return out;
  };
  std::vector<std::string> required;
  if (const JValue* r = member(s, "required"); r && r->IsArray())
    for (const auto& x : r->GetArray())
      if (x.IsString() && std::find(required.begin(), required.end(), sv(x)) == required.end())
        required.emplace_back(sv(x));
  for (auto& [name, schema] : props) {
    std::vector<const JValue*> m = matching(name);
    if (m.empty()) continue;
    m.push_back(schema);
    schema = &all_of(std::move(m), "patternProperties");
  }
  for (const auto& r : required) {
    bool known = false;
    for (const auto& p : props) known = known || p.first == r;
    if (known) continue;
    const std::vector<const JValue*> m = matching(r);
    if (!m.empty()) {
      props.emplace_back(r, &all_of(m, "patternProperties"));
      continue;
    }
    if (addl_false) return e_nothing();
    props.emplace_back(r, addl ? addl : &true_schema());
  }
  // Member symbols: (rule, required index or -1).
  std::vector<std::pair<int32_t, int>> syms;
  std::vector<ExprPtr> keys;
  for (const auto& [name, schema] : props) {
    keys.push_back(e_lit(json_quote(name)));
    int ri = -1;
    for (size_t i = 0; i < required.size(); ++i)
      if (required[i] == name) ri = static_cast<int>(i);
    syms.emplace_back(member_rule(keys.back(), *schema), ri);
  }
  std::shared_ptr<const Dfa> named;  // built on first use
  auto minus_names = [&](std::shared_ptr<const Dfa> d) {
    if (keys.empty()) return d;
    if (!named) named = build_dfa(e_alt(keys), b_.budget());
    return std::shared_ptr<const Dfa>(dfa_product(*d, *named, ProductMode::AndNot, b_.budget()));
  };
  if (!pats.empty()) {
    // Patterns grouped by schema; a key in the patterns of the groups in S and of no other
    // group is a member with the allOf of those schemas (every nonempty S, at most 2^4 - 1).
    std::vector<const JValue*> gs;         // distinct pattern schemas
    std::vector<std::vector<ExprPtr>> gk;  // their patterns' key DFAs
    for (const auto& [dfa, schema] : pats) {
      size_t g = 0;
      while (g < gs.size() && !(*gs[g] == *schema)) ++g;
      if (g == gs.size()) gs.push_back(schema), gk.emplace_back();
      gk[g].push_back(e_embed(dfa));
    }
    if (gs.size() > 4) throw SchemaError("patternProperties", "more than 4 distinct pattern schemas");
    std::vector<std::shared_ptr<const Dfa>> gd;
    for (auto& k : gk) gd.push_back(build_dfa(e_alt(std::move(k)), b_.budget()));
    for (size_t S = 1; S < (size_t{1} << gs.size()); ++S) {
      std::shared_ptr<const Dfa> k;
      std::vector<const JValue*> schemas;
      for (size_t i = 0; i < gs.size(); ++i) {
        if (!(S >> i & 1)) continue;
        schemas.push_back(gs[i]);
        k = k ? std::shared_ptr<const Dfa>(dfa_product(*k, *gd[i], ProductMode::And, b_.budget())) : gd[i];
      }
      for (size_t i = 0; i < gs.size(); ++i)
        if (!(S >> i & 1)) k = dfa_product(*k, *gd[i], ProductMode::AndNot, b_.budget());
      k = minus_names(k);
      if (k->empty_language()) continue;
      syms.emplace_back(member_rule(e_embed(k), all_of(schemas, "patternProperties")), -1);
    }
  }
  if (!addl_false) {
    // Any other key: a JSON string that is none of the property names (nor matches a pattern;
    // then only canonically escaped keys, the spelling patterns are matched on).
    std::shared_ptr<const Dfa> key = any_string();
    if (!pats.empty()) {
      std::vector<ExprPtr> ex;
      for (const auto& p : pats) ex.push_back(e_embed(p.first));
      auto any = build_dfa(e_seq({e_byte('"'), e_embed(json_content_dfa("", b_.budget())), e_byte('"')}), b_.budget());
      key = dfa_product(*any, *build_dfa(e_alt(ex), b_.budget()), ProductMode::AndNot, b_.budget());
    }
    syms.emplace_back(member_rule(e_embed(minus_names(key)), addl ? *addl : true_schema()), -1);
  }
  // With at most kMaxRequiredSet declared properties every one of them is tracked (a bit each:
  // none can repeat, so the object is bounded); otherwise the required ones (as a set, or
  // beyond kMaxRequiredSet as a count: see the header). Undeclared keys are not tracked.
  const bool track_all = props.size() <= kMaxRequiredSet;
  if (track_all) {
    for (size_t i = 0; i < props.size(); ++i) syms[i].second = static_cast<int>(i);
  }
  size_t full_mask = 0;  // the bits that must be set to close the object (tracked sets)
  for (size_t i = 0; track_all && i < props.size(); ++i) {
    if (std::find(required.begin(), required.end(), props[i].first) != required.end()) full_mask |= size_t{1} << i;
  }
  const size_t R = track_all ? props.size() : required.size();
  const bool subset = R <= kMaxRequiredSet;
  if (!track_all) full_mask = subset ? (size_t{1} << R) - 1 : 0;
  // Nodes: 0 start, 1 after "{", then per level (mask or count) A (expects a member) and B
  // (after a member); the last node accepts. The whitespace around a member is in its rule.
  const size_t levels = subset ? (size_t{1} << R) : R + 1;
  const int32_t fin = static_cast<int32_t>(2 + 2 * levels);
  auto A = [](size_t l) { return static_cast<int32_t>(2 + 2 * l); };
  auto B = [](size_t l) { return static_cast<int32_t>(3 + 2 * l); };
  const auto closes = [&](size_t l) { return subset ? (l & full_mask) == full_mask : l == R; };
  auto next_level = [&](size_t l, int ri) -> std::optional<size_t> {
    if (ri < 0) return l;
    if (subset) {
      if (l & (size_t{1} << ri)) return std::nullopt;  // a tracked key once
      return l | (size_t{1} << ri);
    }
    return std::min(l + 1, R);
  };
  std::vector<Expr::Edge> edges;
  const ExprPtr comma = e_byte(',');
  const ExprPtr close = e_byte('}');
  edges.push_back({0, 1, e_byte('{')});
  if (closes(0)) edges.push_back({1, fin, e_seq({ws_, close})});
  for (size_t l = 0; l < levels; ++l) {
    for (const auto& [rule, ri] : syms) {
      const auto nl = next_level(l, ri);
      if (!nl) continue;
      edges.push_back({A(l), B(*nl), e_call(rule)});
      if (l == 0) edges.push_back({1, B(*nl), e_call(rule)});
    }
    edges.push_back({B(l), A(l), comma});
    if (closes(l)) edges.push_back({B(l), fin, close});
  }
  return e_graph(fin + 1, {fin}, std::move(edges));
}

ExprPtr Compiler::array_for(const JValue& s) {
  std::vector<const JValue*> tuple;
  const JValue* rest = nullptr;
  const JValue* items = member(s, "items");
  if (const JValue* p = member(s, "prefixItems"); p && p->IsArray()) {
    for (const auto& x : p->GetArray()) tuple.push_back(&x);
    rest = items;
  } else if (items && items->IsArray()) {
    for (const auto& x : items->GetArray()) tuple.push_back(&x);
    rest = member(s, "additionalItems");
  } else {
    rest = items;
  }
  if (!rest) rest = &true_schema();
  const bool rest_false = rest->IsBool() && !rest->GetBool();
  const uint64_t mn = count_kw(s, "minItems", 0);
  uint64_t mx = count_kw(s, "maxItems", UINT64_MAX);
  if (rest_false) mx = std::min<uint64_t>(mx, tuple.size());
  if (mn > mx) return e_nothing();
  const bool bounded = mx != UINT64_MAX;
  const uint64_t len = bounded ? mx : std::max<uint64_t>(std::max<uint64_t>(mn, tuple.size()), 1);
  if (len > kMaxUnroll) throw SchemaError(bounded ? "maxItems" : "minItems", "too many positions to unroll");
  // Nodes: 0 start, 1 + i after i items, last accepts.
  const int32_t fin = static_cast<int32_t>(len + 2);
  auto N = [](uint64_t i) { return static_cast<int32_t>(1 + i); };
  // Many positions: items bring their leading whitespace (spaced_item_rule); a few positions are
  // not worth a rule of their own. (Trailing whitespace in the item rule, as members have it,
  // measured slower masks here for no compile gain.)
  const bool spaced = len >= kMinSpacedItems;
  auto item = [&](uint64_t i) {
    const JValue& schema = i < tuple.size() ? *tuple[i] : *rest;
    return spaced ? e_call(spaced_item_rule(schema)) : e_seq({ws_, e_call(rule_for(schema))});
  };
  std::vector<Expr::Edge> edges;
  const ExprPtr comma = e_seq({ws_, e_byte(',')});
  const ExprPtr close = e_seq({ws_, e_byte(']')});
  edges.push_back({0, N(0), e_byte('[')});
  if (mn == 0) edges.push_back({N(0), fin, close});
  for (uint64_t i = 0; i < len; ++i) {
    edges.push_back({N(i), N(i + 1), i == 0 ? item(0) : e_seq({comma, item(i)})});
    if (i + 1 >= mn) edges.push_back({N(i + 1), fin, close});
  }
  if (!bounded && !rest_false) edges.push_back({N(len), N(len), e_seq({comma, item(len)})});
  return e_graph(fin + 1, {fin}, std::move(edges));
}

}  // namespace

std::shared_ptr<const Grammar> compile_json_schema(const rapidjson::Value& schema, const GrammarOptions& opt) {
  try {
    Compiler c(schema, opt);
    return c.compile_schema();
  } catch (const BudgetExceeded& e) {
    throw SchemaError("$budget", e.what());
  }
}

int32_t define_json_schema_rule(GrammarBuilder& builder, const rapidjson::Value& root, const rapidjson::Value& schema,
                                const GrammarOptions& opt) {
  try {
    Compiler c(builder, root, opt);
    return c.value_rule(schema);
  } catch (const BudgetExceeded& e) {
    throw SchemaError("$budget", e.what());
  }
}

std::shared_ptr<const Grammar> compile_json_object(const GrammarOptions& opt) {
  const JValue empty(rapidjson::kObjectType);
  Compiler c(empty, opt);
  return c.compile_any(true);
}

std::shared_ptr<const Grammar> compile_json_value(const GrammarOptions& opt) {
  const JValue empty(rapidjson::kObjectType);
  Compiler c(empty, opt);
  return c.compile_any(false);
}

}  // namespace ds::structured
