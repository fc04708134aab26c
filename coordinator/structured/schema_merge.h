// Internal: JSON Schema documents as the compiler sees them — keyword classes, local $ref
// resolution (JSON pointers), numeric bounds, and allOf merging into a fresh schema.
#pragma once

#include <rapidjson/document.h>

#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ds::structured {

using JValue = rapidjson::Value;

// Keywords that constrain instances and that the compiler implements.
bool is_supported_keyword(std::string_view k);
// Validation keywords the compiler cannot honour (SchemaError names them when present).
bool is_refused_keyword(std::string_view k, const JValue& v);
// Any validation keyword (supported or refused); everything else is an annotation or unknown
// and is ignored.
inline bool is_validation_keyword(std::string_view k, const JValue& v) {
  return is_supported_keyword(k) || is_refused_keyword(k, v);
}

struct NumBounds {
  std::optional<double> lo, hi;
  bool lo_excl = false, hi_excl = false;
};
// minimum / maximum / exclusive* in draft 4 (boolean) or draft 6+ (number) form.
NumBounds num_bounds(const JValue& s);

// Owns merged schemas; resolves refs against the root document.
class SchemaStore {
 public:
  explicit SchemaStore(const JValue& root);
  const JValue& root() const { return root_; }
  // "#", "#/definitions/x", "#/$defs/x", any "#/a/b/0" pointer (also prefixed by the root's
  // $id / id). Throws SchemaError{"$ref"}.
  const JValue& resolve(std::string_view ref) const;
  // allOf of `parts` as one schema (stored here). Throws SchemaError{"allOf"} for what cannot
  // be merged.
  const JValue& merge(const std::vector<const JValue*>& parts);
  // `s` without the listed keywords (stored here).
  const JValue& without(const JValue& s, std::initializer_list<std::string_view> drop);
  rapidjson::Document::AllocatorType& alloc() { return doc_.GetAllocator(); }

 private:
  void flatten(const JValue& s, std::vector<const JValue*>& out, bool& is_false, int depth);
  const JValue& keep(JValue v);

  const JValue& root_;
  std::string root_id_;
  rapidjson::Document doc_;
  std::deque<JValue> store_;
};

}  // namespace ds::structured
