// The parameter types declared by a request's `tools` (OpenAI function definitions). The
// model writes every XML tool-call parameter as text; these types decide how each value is
// turned back into JSON.
#pragma once

#include <rapidjson/fwd.h>

#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace ds {

class ToolSchemas {
 public:
  // Parses the JSON text of a `tools` array. Invalid or unexpected JSON yields no schemas
  // (every call is then converted best effort); this never throws on bad input.
  static ToolSchemas parse(std::string_view tools_json);
  // Same, from an already parsed `tools` array.
  static ToolSchemas from_value(const rapidjson::Value& tools);

  // JSON-schema type names allowed for a parameter (e.g. {"integer"} or {"string", "null"});
  // empty when the tool or the parameter is unknown or untyped.
  const std::vector<std::string>& param_types(std::string_view tool, std::string_view param) const;
  bool has_tool(std::string_view tool) const;

 private:
  using ParamTypes = std::unordered_map<std::string, std::vector<std::string>>;
  void add_function(const rapidjson::Value& function);

  std::unordered_map<std::string, ParamTypes> tools_;
};

}  // namespace ds
