#include "coordinator/output_parser/param_value.h"

#include <algorithm>
#include <optional>

#include "coordinator/output_parser/json_text.h"
#include "coordinator/output_parser/text_scan.h"

namespace ds {
namespace {

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return (x | 0x20) == (y | 0x20);  // ASCII letters only, which is all we compare
         });
}

bool starts_number(std::string_view s) {
  return !s.empty() && (s[0] == '-' || (s[0] >= '0' && s[0] <= '9'));
}

std::optional<std::string> as_number(std::string_view s, bool integer_only) {
  if (!starts_number(s)) return std::nullopt;
  auto json = compact_json(s);
  if (!json) return std::nullopt;
  if (integer_only && json->find_first_of(".eE") != std::string::npos) return std::nullopt;
  return json;
}

std::optional<std::string> as_container(std::string_view s, char open) {
  if (s.empty() || s[0] != open) return std::nullopt;
  return compact_json(s);
}

// `s` is the trimmed value text.
std::optional<std::string> convert_as(std::string_view type, std::string_view s) {
  if (type == "integer") return as_number(s, true);
  if (type == "number") return as_number(s, false);
  if (type == "boolean") {
    if (iequals(s, "true")) return std::string("true");
    if (iequals(s, "false")) return std::string("false");
    return std::nullopt;
  }
  if (type == "null") return iequals(s, "null") ? std::optional<std::string>("null") : std::nullopt;
  if (type == "object") return as_container(s, '{');
  if (type == "array") return as_container(s, '[');
  return std::nullopt;
}

}  // namespace

std::string convert_param_value(std::string_view raw, const std::vector<std::string>& types) {
  const std::string_view trimmed = trim_space(raw);
  bool string_allowed = false;
  for (const std::string& type : types) {
    if (type == "string") {
      string_allowed = true;
      continue;
    }
    if (auto json = convert_as(type, trimmed)) return *json;
  }
  if (string_allowed) return json_quote(raw);
  if (auto json = compact_json(trimmed)) return *json;  // unknown type or a mismatch: best effort
  return json_quote(raw);
}

}  // namespace ds
