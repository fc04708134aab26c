#include "coordinator/output_parser/tool_schema.h"

#include <rapidjson/document.h>

namespace ds {
namespace {

const std::vector<std::string>& no_types() {
  static const std::vector<std::string> empty;
  return empty;
}

void add_type_names(const rapidjson::Value& type, std::vector<std::string>& out) {
  if (type.IsString()) {
    out.emplace_back(type.GetString(), type.GetStringLength());
  } else if (type.IsArray()) {
    for (const auto& t : type.GetArray()) {
      if (t.IsString()) out.emplace_back(t.GetString(), t.GetStringLength());
    }
  }
}

// Types of one property schema: `type` itself, or the union over anyOf/oneOf branches.
std::vector<std::string> schema_types(const rapidjson::Value& schema) {
  std::vector<std::string> out;
  if (!schema.IsObject()) return out;
  if (auto it = schema.FindMember("type"); it != schema.MemberEnd()) add_type_names(it->value, out);
  for (const char* key : {"anyOf", "oneOf"}) {
    auto it = schema.FindMember(key);
    if (it == schema.MemberEnd() || !it->value.IsArray()) continue;
    for (const auto& branch : it->value.GetArray()) {
      if (!branch.IsObject()) continue;
      if (auto t = branch.FindMember("type"); t != branch.MemberEnd()) add_type_names(t->value, out);
    }
  }
  return out;
}

}  // namespace

ToolSchemas ToolSchemas::parse(std::string_view tools_json) {
  rapidjson::Document doc;
  doc.Parse(tools_json.data(), tools_json.size());
  if (doc.HasParseError()) return {};
  return from_value(doc);
}

ToolSchemas ToolSchemas::from_value(const rapidjson::Value& tools) {
  ToolSchemas out;
  if (!tools.IsArray()) return out;
  for (const auto& tool : tools.GetArray()) {
    if (!tool.IsObject()) continue;
    // OpenAI nests the definition under "function"; accept a bare definition too.
    auto fn = tool.FindMember("function");
    out.add_function(fn != tool.MemberEnd() ? fn->value : tool);
  }
  return out;
}

void ToolSchemas::add_function(const rapidjson::Value& function) {
  if (!function.IsObject()) return;
  auto name = function.FindMember("name");
  if (name == function.MemberEnd() || !name->value.IsString()) return;
  ParamTypes& params = tools_[std::string(name->value.GetString(), name->value.GetStringLength())];
  auto schema = function.FindMember("parameters");
  if (schema == function.MemberEnd() || !schema->value.IsObject()) return;
  auto props = schema->value.FindMember("properties");
  if (props == schema->value.MemberEnd() || !props->value.IsObject()) return;
  for (const auto& prop : props->value.GetObject()) {
    params[std::string(prop.name.GetString(), prop.name.GetStringLength())] = schema_types(prop.value);
  }
}

const std::vector<std::string>& ToolSchemas::param_types(std::string_view tool, std::string_view param) const {
  auto t = tools_.find(std::string(tool));
  if (t == tools_.end()) return no_types();
  auto p = t->second.find(std::string(param));
  return p == t->second.end() ? no_types() : p->second;
}

bool ToolSchemas::has_tool(std::string_view tool) const {
  return tools_.count(std::string(tool)) > 0;
}

}  // namespace ds
