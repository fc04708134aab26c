// Typed access to request JSON fields with OpenAI-style validation errors: every failure is
// an ApiError(400) whose `param` names the field, so clients learn exactly what to fix.
// A member that is absent or JSON null counts as "not given" (OpenAI clients send nulls).
#pragma once

#include <rapidjson/document.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace ds::openai {

// The member, or nullptr when absent or null. `obj` must be an object.
const rapidjson::Value* field(const rapidjson::Value& obj, const char* name);

std::optional<bool> get_bool(const rapidjson::Value& obj, const char* name);
std::optional<std::string> get_string(const rapidjson::Value& obj, const char* name);
// Integers only (3.0 is rejected, as OpenAI does); range checked.
std::optional<int64_t> get_int(const rapidjson::Value& obj, const char* name, int64_t min, int64_t max);
std::optional<double> get_number(const rapidjson::Value& obj, const char* name, double min, double max);
// An object member (or throws).
const rapidjson::Value* get_object(const rapidjson::Value& obj, const char* name);
// `stop`: a string or an array of strings; each non-empty, at most `max_count` of them.
std::vector<std::string> get_stop(const rapidjson::Value& obj, const char* name, size_t max_count);
// An array of at most `max_count` integers, each in [min, max] (empty when not given).
std::vector<int64_t> get_int_array(const rapidjson::Value& obj, const char* name, int64_t min, int64_t max,
                                   size_t max_count);
// An object mapping token ids (keys: decimal integers, up to INT32_MAX) to numbers in
// [min, max]; sorted by id, one entry per id (a repeated id: the last value wins).
std::vector<std::pair<int32_t, float>> get_token_map(const rapidjson::Value& obj, const char* name, double min,
                                                     double max);

std::string to_string(const rapidjson::Value& v);  // a string value's bytes

// Parses a request body; malformed JSON, invalid UTF-8 or a non-object → ApiError(400).
rapidjson::Document parse_body(const std::string& body);

}  // namespace ds::openai
