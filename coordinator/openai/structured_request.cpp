#include "coordinator/openai/structured_request.h"

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <stdexcept>

#include "coordinator/http/api_error.h"
#include "coordinator/openai/json_fields.h"
#include "coordinator/structured/grammar.h"
#include "coordinator/structured/json_schema_compiler.h"
#include "coordinator/structured/tool_call_grammar.h"

namespace ds::openai {

namespace {

[[noreturn]] void bad(const std::string& param, const std::string& message) {
  throw ApiError(400, message, param);
}

std::string compact(const rapidjson::Value& v) {
  rapidjson::StringBuffer buf;
  rapidjson::Writer<rapidjson::StringBuffer> w(buf);
  v.Accept(w);
  return std::string(buf.GetString(), buf.GetSize());
}

// A schema given as an object, a boolean, or (vLLM's guided_json) as JSON text.
std::string schema_text(const rapidjson::Value& v, const std::string& param) {
  if (v.IsObject() || v.IsBool()) return compact(v);
  if (v.IsString()) {
    rapidjson::Document d;
    d.Parse(v.GetString(), v.GetStringLength());
    if (d.HasParseError() || !(d.IsObject() || d.IsBool())) bad(param, "'" + param + "' is not a JSON schema");
    return compact(d);
  }
  bad(param, "'" + param + "' must be a JSON schema (an object)");
}

// Sets `spec` once: a second structured-output field is a conflict.
void set(StructuredSpec& spec, StructuredSpec::Kind kind, const std::string& param, std::string text = {}) {
  if (spec.active()) bad(param, "'" + param + "' conflicts with '" + spec.param + "': ask for one output constraint");
  spec.kind = kind;
  spec.param = param;
  spec.text = std::move(text);
}

std::vector<std::string> choice_list(const rapidjson::Value& v, const std::string& param) {
  if (!v.IsArray() || v.Empty()) bad(param, "'" + param + "' must be a non-empty array of strings");
  std::vector<std::string> out;
  for (const auto& c : v.GetArray()) {
    if (!c.IsString()) bad(param, "'" + param + "' must be a non-empty array of strings");
    out.push_back(to_string(c));
  }
  return out;
}

void parse_response_format(const rapidjson::Value& req, StructuredSpec& spec) {
  const rapidjson::Value* rf = get_object(req, "response_format");
  if (rf == nullptr) return;
  const std::string type = get_string(*rf, "type").value_or("");
  if (type == "text") return;
  if (type == "json_object") return set(spec, StructuredSpec::Kind::kJsonObject, "response_format");
  if (type != "json_schema") {
    bad("response_format", "response_format.type must be 'text', 'json_object' or 'json_schema'");
  }
  const rapidjson::Value* schema = nullptr;
  if (const rapidjson::Value* js = field(*rf, "json_schema")) {
    if (!js->IsObject()) bad("response_format", "response_format.json_schema must be an object");
    if (const rapidjson::Value* name = field(*js, "name"); name != nullptr && !name->IsString()) {
      bad("response_format", "response_format.json_schema.name must be a string");
    }
    if (const rapidjson::Value* strict = field(*js, "strict"); strict != nullptr && !strict->IsBool()) {
      bad("response_format", "response_format.json_schema.strict must be a boolean");
    }
    schema = field(*js, "schema");
  } else {
    schema = field(*rf, "schema");
  }
  if (schema == nullptr) bad("response_format", "response_format.json_schema.schema is required");
  set(spec, StructuredSpec::Kind::kJsonSchema, "response_format", schema_text(*schema, "response_format"));
}

// vLLM's structured_outputs object, and its older top-level guided_* fields.
void parse_vllm_fields(const rapidjson::Value& req, StructuredSpec& spec) {
  if (const rapidjson::Value* so = get_object(req, "structured_outputs")) {
    for (const char* unsupported : {"grammar", "structural_tag"}) {
      if (field(*so, unsupported) != nullptr) {
        bad("structured_outputs", std::string("structured_outputs.") + unsupported + " is not supported");
      }
    }
    if (const rapidjson::Value* j = field(*so, "json")) {
      set(spec, StructuredSpec::Kind::kJsonSchema, "structured_outputs.json",
          schema_text(*j, "structured_outputs.json"));
    }
    if (auto r = get_string(*so, "regex")) set(spec, StructuredSpec::Kind::kRegex, "structured_outputs.regex", *r);
    if (const rapidjson::Value* c = field(*so, "choice")) {
      set(spec, StructuredSpec::Kind::kChoice, "structured_outputs.choice");
      spec.choices = choice_list(*c, "structured_outputs.choice");
    }
    if (get_bool(*so, "json_object").value_or(false)) {
      set(spec, StructuredSpec::Kind::kJsonObject, "structured_outputs.json_object");
    }
  }
  if (const rapidjson::Value* j = field(req, "guided_json")) {
    set(spec, StructuredSpec::Kind::kJsonSchema, "guided_json", schema_text(*j, "guided_json"));
  }
  if (auto r = get_string(req, "guided_regex")) set(spec, StructuredSpec::Kind::kRegex, "guided_regex", *r);
  if (const rapidjson::Value* c = field(req, "guided_choice")) {
    set(spec, StructuredSpec::Kind::kChoice, "guided_choice");
    spec.choices = choice_list(*c, "guided_choice");
  }
  if (field(req, "guided_grammar") != nullptr) bad("guided_grammar", "'guided_grammar' is not supported");
}

std::string cache_key(const StructuredSpec& spec) {
  std::string key = std::to_string(static_cast<int>(spec.kind)) + '\n' + spec.text;
  for (const std::string& c : spec.choices) key += '\n' + std::to_string(c.size()) + ':' + c;
  for (const std::string& n : spec.tool_names) key += "\nfn:" + n;
  if (spec.kind == StructuredSpec::Kind::kToolCalls) key += spec.parallel_tool_calls ? "\nparallel" : "\nsingle";
  return key;
}

std::shared_ptr<const structured::Grammar> compile_spec(const StructuredSpec& spec) {
  using Kind = StructuredSpec::Kind;
  rapidjson::Document doc;
  if (spec.kind == Kind::kJsonSchema || spec.kind == Kind::kToolCalls) doc.Parse(spec.text.data(), spec.text.size());
  switch (spec.kind) {
    case Kind::kJsonObject:
      return structured::compile_json_object();
    case Kind::kJsonSchema:
      return structured::compile_json_schema(doc);
    case Kind::kRegex:
      return structured::compile_regex(spec.text);
    case Kind::kChoice:
      return structured::compile_choice(spec.choices);
    case Kind::kToolCalls:
      return structured::compile_tool_calls(doc, {spec.tool_names, spec.parallel_tool_calls});
    case Kind::kNone:
      break;
  }
  return nullptr;
}

}  // namespace

StructuredSpec parse_structured_spec(const rapidjson::Value& req) {
  StructuredSpec spec;
  parse_response_format(req, spec);
  parse_vllm_fields(req, spec);
  if (const rapidjson::Value* js = field(req, "json_schema")) {
    set(spec, StructuredSpec::Kind::kJsonSchema, "json_schema", schema_text(*js, "json_schema"));
  }
  if (field(req, "grammar") != nullptr) bad("grammar", "'grammar' (GBNF) is not supported; use a JSON schema or regex");
  return spec;
}

std::shared_ptr<const structured::Grammar> GrammarCache::compile(const StructuredSpec& spec) {
  const std::string key = cache_key(spec);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = index_.find(key); it != index_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      return it->second->second;
    }
  }
  std::shared_ptr<const structured::Grammar> g;
  try {
    g = compile_spec(spec);
  } catch (const structured::SchemaError& e) {
    const std::string what = e.keyword == "$budget"          ? "it is too large to compile"
                             : e.keyword == "$unsatisfiable" ? "nothing satisfies it"
                             : e.keyword == "pattern"        ? "a regular expression outside the supported subset"
                                                             : "'" + e.keyword + "' is not supported";
    throw ApiError(400, "Cannot enforce '" + spec.param + "': " + what + " (" + e.what() + ")", spec.param,
                   "unsupported_schema");
  } catch (const std::invalid_argument& e) {
    throw ApiError(400, "Cannot enforce '" + spec.param + "': " + e.what(), spec.param, "unsupported_schema");
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (index_.count(key) == 0) {
    lru_.emplace_front(key, g);
    index_[key] = lru_.begin();
    if (lru_.size() > capacity_) {
      index_.erase(lru_.back().first);
      lru_.pop_back();
    }
  }
  return g;
}

}  // namespace ds::openai
