#include "coordinator/structured/tool_call_grammar.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <string_view>
#include <utility>

#include "coordinator/structured/json_lexemes.h"
#include "coordinator/structured/json_schema_compiler.h"
#include "coordinator/structured/regex.h"
#include "coordinator/structured/schema_merge.h"

namespace ds::structured {

namespace {

// The output parser gives up on a function or parameter name of this many bytes
// (OutputParser::kMaxTagBytes).
constexpr size_t kMaxNameBytes = 256;
constexpr uint64_t kMaxLength = 1 << 16;
constexpr std::string_view kParamClose = "</parameter>";

std::string_view sv(const JValue& v) {
  return {v.GetString(), v.GetStringLength()};
}

const JValue* member(const JValue& s, const char* k) {
  if (!s.IsObject()) return nullptr;
  auto it = s.FindMember(k);
  return it == s.MemberEnd() ? nullptr : &it->value;
}

// Can the parser read `name` back from <function=name> / <parameter=name>?
bool writable_name(std::string_view name) {
  return !name.empty() && name.size() < kMaxNameBytes && name.find_first_of("<>\n") == std::string_view::npos;
}

using Types = std::vector<std::string>;

void add_type_names(const JValue* type, Types& out) {
  if (!type) return;
  if (type->IsString()) out.emplace_back(sv(*type));
  if (type->IsArray())
    for (const auto& t : type->GetArray())
      if (t.IsString()) out.emplace_back(sv(t));
}

// The types the output parser reads for a parameter (tool_schema.cpp): `type`, plus the
// `type` of each anyOf / oneOf branch.
Types parser_types(const JValue& s) {
  Types out;
  add_type_names(member(s, "type"), out);
  for (const char* k : {"anyOf", "oneOf"})
    if (const JValue* b = member(s, k); b && b->IsArray())
      for (const auto& x : b->GetArray()) add_type_names(member(x, "type"), out);
  return out;
}

bool has(const Types& t, std::string_view name) {
  return std::find(t.begin(), t.end(), name) != t.end();
}

// The non-string types the parser converts (param_value.cpp), in order, without duplicates.
Types other_types(const Types& t) {
  Types out;
  for (const auto& x : t)
    if (x != "string" && !has(out, x) &&
        (x == "null" || x == "boolean" || x == "integer" || x == "number" || x == "object" || x == "array"))
      out.push_back(x);
  return out;
}

ExprPtr any_char() {
  static const ExprPtr c = pattern_to_raw("[\\s\\S]");
  return c;
}

ExprPtr any_text() {
  return e_rep(any_char(), 0, kUnbounded);
}

// ASCII letters in either case (the parser compares true / false / null case-insensitively).
ExprPtr ci_lit(std::string_view s) {
  std::vector<ExprPtr> seq;
  for (char c : s) {
    ByteSet b;
    b.set(static_cast<uint8_t>(c));
    if (c >= 'a' && c <= 'z') b.set(static_cast<uint8_t>(c - 'a' + 'A'));
    seq.push_back(e_bytes(b));
  }
  return e_seq(std::move(seq));
}

// Raw text that the parser would convert as one of `others` (a superset for object / array:
// anything starting with the bracket), after trimming whitespace.
ExprPtr converts_as(const Types& others) {
  std::vector<ExprPtr> alts;
  for (const auto& t : others) {
    if (t == "null") alts.push_back(ci_lit("null"));
    if (t == "boolean") alts.push_back(e_alt({ci_lit("true"), ci_lit("false")}));
    if (t == "integer") alts.push_back(integer_expr());
    if (t == "number") alts.push_back(number_expr());
    if (t == "object") alts.push_back(e_seq({e_byte('{'), any_text()}));
    if (t == "array") alts.push_back(e_seq({e_byte('['), any_text()}));
  }
  ByteSet ws;
  for (char c : {' ', '\t', '\n', '\r'}) ws.set(static_cast<uint8_t>(c));
  const ExprPtr w = e_rep(e_bytes(ws), 0, kUnbounded);
  return e_seq({w, e_alt(std::move(alts)), w});
}

// What a raw value must not be: containing </parameter> (the parser cuts the value there),
// ending with "\r" (the parser drops "\r\n" before </parameter>), or text the parser would
// read as one of the other declared types.
ExprPtr raw_exclusions(const Types& others) {
  std::vector<ExprPtr> alts = {e_seq({any_text(), e_lit(kParamClose), any_text()}), e_seq({any_text(), e_byte('\r')})};
  if (!others.empty()) alts.push_back(converts_as(others));
  return e_alt(std::move(alts));
}

// JSON Schema `pattern` is a search. With no anchor character the pattern is wrapped in
// "anything"; otherwise pattern_to_raw matches it in full (exact for ^...$, a subset else).
std::shared_ptr<Dfa> raw_pattern(std::string_view pattern, const char* kw, Budget& budget) {
  try {
    if (pattern.find_first_of("^$") == std::string_view::npos)
      return build_dfa(e_seq({any_text(), pattern_to_raw(pattern), any_text()}), budget);
    return build_dfa(pattern_to_raw(pattern), budget);
  } catch (const SchemaError&) {
    throw;
  } catch (const std::invalid_argument& e) {
    throw SchemaError(kw, e.what());
  }
}

uint64_t count_kw(const JValue& s, const char* k, uint64_t dflt) {
  const JValue* v = member(s, k);
  if (!v) return dflt;
  if (!v->IsNumber() || v->GetDouble() < 0) throw SchemaError(k, "must be a non-negative number");
  const double d = v->GetDouble();
  if (d > static_cast<double>(kMaxLength)) {
    if (dflt == 0) throw SchemaError(k, "too large");
    return dflt;  // a maxLength beyond the cap: unbounded (no model writes that much)
  }
  return static_cast<uint64_t>(std::ceil(d));
}

// A string schema's raw text: enum / const as literals, else its pattern, format and length.
std::shared_ptr<Dfa> raw_string_branch(const JValue& s, Budget& budget) {
  for (const char* k : {"$ref", "allOf", "anyOf", "oneOf", "not", "if"})
    if (member(s, k)) throw SchemaError(k, "not supported on a string-typed tool parameter");
  const JValue* c = member(s, "const");
  const JValue* e = member(s, "enum");
  if (c || e) {
    std::vector<ExprPtr> lits;
    auto add = [&](const JValue& v) {
      if (v.IsString()) lits.push_back(e_lit(sv(v)));
    };
    if (c) add(*c);
    if (e && e->IsArray())
      for (const auto& v : e->GetArray())
        if (!c || v == *c) add(v);
    return build_dfa(e_alt(std::move(lits)), budget);
  }
  std::vector<std::shared_ptr<Dfa>> parts = {build_dfa(any_text(), budget)};
  if (const JValue* f = member(s, "format"); f && f->IsString()) {
    std::string pat;
    const FormatSupport fs = format_pattern(sv(*f), pat);
    if (fs == FormatSupport::Refused) throw SchemaError("format", "format \"" + std::string(sv(*f)) + "\"");
    if (fs == FormatSupport::Enforced) parts.push_back(raw_pattern(pat, "format", budget));
  }
  if (const JValue* p = member(s, "pattern")) {
    if (!p->IsString()) throw SchemaError("pattern", "pattern must be a string");
    parts.push_back(raw_pattern(sv(*p), "pattern", budget));
  }
  const uint64_t mn = count_kw(s, "minLength", 0);
  const uint64_t mx = count_kw(s, "maxLength", UINT64_MAX);
  if (mn > mx) return build_dfa(e_nothing(), budget);
  if (mn > 0 || mx != UINT64_MAX) {
    auto one = build_dfa(any_char(), budget);
    parts.push_back(
        length_dfa(*one, static_cast<uint32_t>(mn), mx == UINT64_MAX ? kUnbounded : static_cast<uint32_t>(mx), budget));
  }
  std::shared_ptr<Dfa> d = parts[0];
  for (size_t i = 1; i < parts.size(); ++i) d = dfa_product(*d, *parts[i], ProductMode::And, budget);
  return d;
}

// A parameter whose types include "string", split into its string schemas (raw text) and
// the schemas of its other types (JSON values).
struct Split {
  std::vector<const JValue*> strings;
  std::vector<const JValue*> json;
};

class ToolGrammar {
 public:
  explicit ToolGrammar(const GrammarOptions& opt) : opt_(opt), json_opt_(opt), b_(opt) {
    json_opt_.forbid_in_strings = std::string(kParamClose);  // JSON values end at the close tag too
  }

  std::shared_ptr<const Grammar> compile(const JValue& tools, const ToolCallConstraint& c);

 private:
  struct Fn {
    std::string name;
    const JValue* parameters;  // may be null
  };
  std::vector<Fn> select(const JValue& tools, const ToolCallConstraint& c);
  ExprPtr call_expr(const Fn& fn);
  std::vector<ExprPtr> param_elements(const JValue& params);
  ExprPtr param_element(const std::string& name, int32_t value_rule, bool required);
  int32_t value_rule(const JValue& root, const JValue& schema, const Types& types);
  int32_t mixed_rule(const JValue& root, const JValue& schema, const Types& types);
  Split split(const JValue& schema);
  const JValue* with_types(const JValue& s, const Types& types);

  GrammarOptions opt_;
  GrammarOptions json_opt_;  // the JSON values' options: strings never hold </parameter>
  GrammarBuilder b_;
  rapidjson::Document scratch_;  // allocator of the derived schemas
  std::deque<JValue> derived_;   // stable addresses
};

// A copy of `s` whose `type` is `types` (and without OpenAPI `nullable`, which the parser
// does not read: a JSON null there would come back as the string "null").
const JValue* ToolGrammar::with_types(const JValue& s, const Types& types) {
  auto& a = scratch_.GetAllocator();
  JValue& out = derived_.emplace_back(s, a);
  out.RemoveMember("type");
  out.RemoveMember("nullable");
  JValue t(rapidjson::kArrayType);
  for (const auto& x : types) t.PushBack(JValue(x.c_str(), static_cast<rapidjson::SizeType>(x.size()), a), a);
  out.AddMember("type", t, a);
  return &out;
}

Split ToolGrammar::split(const JValue& s) {
  Split out;
  const JValue* any = member(s, "anyOf");
  const JValue* one = member(s, "oneOf");
  if (!any && !one) {
    out.strings.push_back(&s);
    Types t;
    add_type_names(member(s, "type"), t);
    if (const Types o = other_types(t); !o.empty()) out.json.push_back(with_types(s, o));
    return out;
  }
  const char* kw = any ? "anyOf" : "oneOf";
  for (const auto& m : s.GetObject())
    if (sv(m.name) != kw && is_validation_keyword(sv(m.name), m.value))
      throw SchemaError(std::string(sv(m.name)), std::string("next to ") + kw + " on a string-typed tool parameter");
  if (!(any ? any : one)->IsArray()) throw SchemaError(kw, "must be an array");
  for (const auto& b : (any ? any : one)->GetArray()) {
    Types t;
    add_type_names(member(b, "type"), t);
    if (t.empty()) continue;  // the parser would read its values as strings: left out
    const Types o = other_types(t);
    if (has(t, "string")) out.strings.push_back(&b);
    if (o.empty()) continue;
    out.json.push_back(o.size() == t.size() ? &b : with_types(b, o));
  }
  if (one && out.strings.size() > 1) throw SchemaError("oneOf", "several string branches on a tool parameter");
  return out;
}

// Raw text for the string schemas, or a JSON value for the other types.
int32_t ToolGrammar::mixed_rule(const JValue& root, const JValue& s, const Types& types) {
  const Split sp = split(s);
  std::vector<ExprPtr> alts;
  if (!sp.strings.empty()) {
    std::vector<ExprPtr> raws;
    for (const JValue* b : sp.strings) raws.push_back(e_embed(raw_string_branch(*b, b_.budget())));
    auto text = build_dfa(e_alt(std::move(raws)), b_.budget());
    auto bad = build_dfa(raw_exclusions(other_types(types)), b_.budget());
    alts.push_back(e_embed(dfa_product(*text, *bad, ProductMode::AndNot, b_.budget())));
  }
  for (const JValue* j : sp.json) alts.push_back(e_call(define_json_schema_rule(b_, root, *j, json_opt_)));
  const int32_t r = b_.new_rule();
  b_.define(r, e_alt(std::move(alts)));
  return r;
}

int32_t ToolGrammar::value_rule(const JValue& root, const JValue& s, const Types& types) {
  // Without "string" the parser reads the text as JSON (typed or best effort), so the value
  // is written as JSON.
  if (!has(types, "string")) return define_json_schema_rule(b_, root, s, json_opt_);
  return mixed_rule(root, s, types);
}

ExprPtr ToolGrammar::param_element(const std::string& name, int32_t value_rule, bool required) {
  // The value sits on lines of its own: the parser drops the newline after <parameter=P> and
  // the one before </parameter>.
  const ExprPtr e = e_seq({e_lit("<parameter=" + name + ">\n"), e_call(value_rule), e_lit("\n</parameter>\n")});
  return required ? e : e_opt(e);
}

std::vector<ExprPtr> ToolGrammar::param_elements(const JValue& params) {
  if (!params.IsObject()) throw SchemaError("parameters", "must be an object schema");
  for (const char* k : {"$ref", "allOf", "anyOf", "oneOf"})
    if (member(params, k)) throw SchemaError(k, "tool parameters must be a plain object schema");
  for (const auto& m : params.GetObject())
    if (is_refused_keyword(sv(m.name), m.value)) throw SchemaError(std::string(sv(m.name)), "keyword not supported");
  if (const JValue* t = member(params, "type")) {
    Types ts;
    add_type_names(t, ts);
    if (!has(ts, "object")) throw SchemaError("type", "tool parameters must be of type object");
  }
  std::vector<std::string> required;
  if (const JValue* r = member(params, "required"); r && r->IsArray())
    for (const auto& x : r->GetArray())
      if (x.IsString() && !has(required, sv(x))) required.emplace_back(sv(x));
  const JValue* props = member(params, "properties");
  if (props && !props->IsObject()) throw SchemaError("properties", "must be an object");
  std::vector<ExprPtr> out;
  std::vector<std::string> declared;
  if (props) {
    for (const auto& m : props->GetObject()) {
      const std::string name(sv(m.name));
      declared.push_back(name);
      const bool req = has(required, name);
      if (!writable_name(name)) {
        if (req) throw SchemaError("properties", "parameter name \"" + name + "\" cannot be written as XML markup");
        continue;
      }
      out.push_back(param_element(name, value_rule(params, m.value, parser_types(m.value)), req));
    }
  }
  // Required but not declared: typed by additionalProperties; the parser knows no type for
  // them, so they are JSON.
  const JValue* addl = member(params, "additionalProperties");
  static const JValue kTrue(true);
  for (const auto& name : required) {
    if (has(declared, name)) continue;
    if (addl && addl->IsBool() && !addl->GetBool())
      throw SchemaError("required", "\"" + name + "\" is required but additionalProperties is false");
    if (!writable_name(name)) throw SchemaError("required", "parameter name \"" + name + "\" cannot be written");
    out.push_back(param_element(name, define_json_schema_rule(b_, params, addl ? *addl : kTrue, json_opt_), true));
  }
  return out;
}

ExprPtr ToolGrammar::call_expr(const Fn& fn) {
  std::vector<ExprPtr> seq = {e_lit("<tool_call>\n<function=" + fn.name + ">\n")};
  if (fn.parameters)
    for (auto& e : param_elements(*fn.parameters)) seq.push_back(std::move(e));
  seq.push_back(e_lit("</function>\n</tool_call>"));
  // A rule per call: the matcher's configurations stay small across the calls' alternatives.
  const int32_t r = b_.new_rule();
  b_.define(r, e_seq(std::move(seq)));
  return e_call(r);
}

std::vector<ToolGrammar::Fn> ToolGrammar::select(const JValue& tools, const ToolCallConstraint& c) {
  if (!tools.IsArray()) throw SchemaError("tools", "must be an array");
  std::vector<Fn> all;
  for (const auto& tool : tools.GetArray()) {
    const JValue* f = member(tool, "function");
    const JValue& fn = f ? *f : tool;  // as the output parser: nested or bare definitions
    const JValue* name = member(fn, "name");
    if (!name || !name->IsString()) throw SchemaError("tools", "a tool without a function name");
    all.push_back({std::string(sv(*name)), member(fn, "parameters")});
  }
  std::vector<Fn> out;
  for (const Fn& fn : all)
    if (c.names.empty() || has(c.names, fn.name)) {
      for (const Fn& o : out)
        if (o.name == fn.name) throw SchemaError("tools", "duplicate function name \"" + fn.name + "\"");
      if (!writable_name(fn.name))
        throw SchemaError("tools", "function name \"" + fn.name + "\" cannot be written as XML markup");
      out.push_back(fn);
    }
  for (const auto& n : c.names) {
    bool found = false;
    for (const Fn& fn : out) found = found || fn.name == n;
    if (!found) throw SchemaError("tool_choice", "no tool named \"" + n + "\"");
  }
  if (out.empty()) throw SchemaError("tools", "no tools to call");
  return out;
}

std::shared_ptr<const Grammar> ToolGrammar::compile(const JValue& tools, const ToolCallConstraint& c) {
  std::vector<ExprPtr> calls;
  for (const Fn& fn : select(tools, c)) calls.push_back(call_expr(fn));
  const ExprPtr one = e_alt(std::move(calls));
  const int32_t root = b_.new_rule();
  if (c.parallel) {
    // The template separates consecutive calls with one newline.
    b_.define(root, e_seq({one, e_rep(e_seq({e_byte('\n'), one}), 0, kUnbounded)}));
  } else {
    b_.define(root, one);
  }
  return b_.finish(root);
}

}  // namespace

std::shared_ptr<const Grammar> compile_tool_calls(const rapidjson::Value& tools, const ToolCallConstraint& constraint,
                                                  const GrammarOptions& opt) {
  try {
    ToolGrammar g(opt);
    return g.compile(tools, constraint);
  } catch (const BudgetExceeded& e) {
    throw SchemaError("$budget", e.what());
  }
}

}  // namespace ds::structured
