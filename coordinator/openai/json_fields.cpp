#include "coordinator/openai/json_fields.h"

#include <rapidjson/error/en.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>

#include "coordinator/http/api_error.h"

namespace ds::openai {

namespace {

[[noreturn]] void bad(const char* name, const std::string& what) {
  throw ApiError(400, std::string("'") + name + "' " + what, name);
}

}  // namespace

const rapidjson::Value* field(const rapidjson::Value& obj, const char* name) {
  auto it = obj.FindMember(name);
  if (it == obj.MemberEnd() || it->value.IsNull()) return nullptr;
  return &it->value;
}

std::string to_string(const rapidjson::Value& v) {
  return std::string(v.GetString(), v.GetStringLength());
}

std::optional<bool> get_bool(const rapidjson::Value& obj, const char* name) {
  const rapidjson::Value* v = field(obj, name);
  if (v == nullptr) return std::nullopt;
  if (!v->IsBool()) bad(name, "must be a boolean");
  return v->GetBool();
}

std::optional<std::string> get_string(const rapidjson::Value& obj, const char* name) {
  const rapidjson::Value* v = field(obj, name);
  if (v == nullptr) return std::nullopt;
  if (!v->IsString()) bad(name, "must be a string");
  return to_string(*v);
}

std::optional<int64_t> get_int(const rapidjson::Value& obj, const char* name, int64_t min, int64_t max) {
  const rapidjson::Value* v = field(obj, name);
  if (v == nullptr) return std::nullopt;
  const std::string range = "between " + std::to_string(min) + " and " + std::to_string(max);
  if (v->IsUint64() && !v->IsInt64()) bad(name, "must be an integer " + range);
  if (!v->IsInt64()) bad(name, "must be an integer");
  const int64_t i = v->GetInt64();
  if (i < min || i > max) bad(name, "must be an integer " + range + ", got " + std::to_string(i));
  return i;
}

std::optional<double> get_number(const rapidjson::Value& obj, const char* name, double min, double max) {
  const rapidjson::Value* v = field(obj, name);
  if (v == nullptr) return std::nullopt;
  if (!v->IsNumber()) bad(name, "must be a number");
  const double d = v->GetDouble();
  if (!std::isfinite(d) || d < min || d > max) {
    bad(name, "must be between " + std::to_string(min) + " and " + std::to_string(max));
  }
  return d;
}

const rapidjson::Value* get_object(const rapidjson::Value& obj, const char* name) {
  const rapidjson::Value* v = field(obj, name);
  if (v != nullptr && !v->IsObject()) bad(name, "must be an object");
  return v;
}

std::vector<std::string> get_stop(const rapidjson::Value& obj, const char* name, size_t max_count) {
  const rapidjson::Value* v = field(obj, name);
  std::vector<std::string> out;
  if (v == nullptr) return out;
  if (v->IsString()) {
    if (v->GetStringLength() == 0) bad(name, "must not be an empty string");
    out.push_back(to_string(*v));
    return out;
  }
  if (!v->IsArray()) bad(name, "must be a string or an array of strings");
  if (v->Size() > max_count) bad(name, "may hold at most " + std::to_string(max_count) + " sequences");
  for (const auto& s : v->GetArray()) {
    if (!s.IsString() || s.GetStringLength() == 0) bad(name, "must contain only non-empty strings");
    out.push_back(to_string(s));
  }
  return out;
}

std::vector<int64_t> get_int_array(const rapidjson::Value& obj, const char* name, int64_t min, int64_t max,
                                   size_t max_count) {
  const rapidjson::Value* v = field(obj, name);
  std::vector<int64_t> out;
  if (v == nullptr) return out;
  if (!v->IsArray()) bad(name, "must be an array of integers");
  if (v->Size() > max_count) bad(name, "may hold at most " + std::to_string(max_count) + " entries");
  for (const auto& item : v->GetArray()) {
    if (!item.IsInt64() || item.GetInt64() < min || item.GetInt64() > max) {
      bad(name, "must hold integers between " + std::to_string(min) + " and " + std::to_string(max));
    }
    out.push_back(item.GetInt64());
  }
  return out;
}

namespace {

// A token id spelled as a JSON object key: decimal digits only, at most INT32_MAX.
std::optional<int32_t> parse_token_id(const rapidjson::Value& key) {
  const char* s = key.GetString();
  const size_t n = key.GetStringLength();
  if (n == 0 || n > 10) return std::nullopt;
  int64_t id = 0;
  for (size_t i = 0; i < n; ++i) {
    if (s[i] < '0' || s[i] > '9') return std::nullopt;
    id = id * 10 + (s[i] - '0');
  }
  if (id > std::numeric_limits<int32_t>::max()) return std::nullopt;
  return static_cast<int32_t>(id);
}

}  // namespace

std::vector<std::pair<int32_t, float>> get_token_map(const rapidjson::Value& obj, const char* name, double min,
                                                     double max) {
  const rapidjson::Value* v = get_object(obj, name);
  if (v == nullptr) return {};
  std::map<int32_t, float> by_id;
  for (const auto& m : v->GetObject()) {
    const std::optional<int32_t> id = parse_token_id(m.name);
    if (!id) bad(name, "keys must be token ids (decimal integers from 0 to 2147483647)");
    const std::string key = std::to_string(*id);
    if (!m.value.IsNumber()) bad(name, "values must be numbers (token " + key + ")");
    const double d = m.value.GetDouble();
    if (!std::isfinite(d) || d < min || d > max) {
      bad(name,
          "values must be between " + std::to_string(min) + " and " + std::to_string(max) + " (token " + key + ")");
    }
    by_id[*id] = static_cast<float>(d);
  }
  return {by_id.begin(), by_id.end()};
}

namespace {

// Deepest [ / { nesting outside strings. Later stages (template values, tool schemas) walk
// JSON recursively, so absurd nesting is refused up front instead of risking the stack.
size_t nesting_depth(const std::string& body) {
  size_t depth = 0, deepest = 0;
  for (size_t i = 0; i < body.size(); ++i) {
    const char c = body[i];
    if (c == '"') {
      // Skip the string with memchr (request bodies are mostly long strings): its end is the
      // first quote after an even run of backslashes.
      for (size_t q = i + 1;; q = i + 1) {
        const void* hit = std::memchr(body.data() + q, '"', body.size() - q);
        if (hit == nullptr) return deepest;  // unterminated: the parser will say so
        i = static_cast<size_t>(static_cast<const char*>(hit) - body.data());
        size_t slashes = 0;
        while (slashes < i - q + 1 && body[i - 1 - slashes] == '\\') ++slashes;
        if (slashes % 2 == 0) break;
      }
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

constexpr size_t kMaxJsonDepth = 64;

// RapidJSON reads a lone low-surrogate escape ("\udc00") into the bytes of U+DC00, ED B0 80,
// which are not UTF-8 (a lone high one it refuses). With raw bytes already validated, such a
// string is the only way those bytes (ED A0..BF) can appear.
bool holds_surrogate(const char* s, size_t n) {
  for (const char* p = s; (p = static_cast<const char*>(std::memchr(p, '\xED', n - (p - s)))) != nullptr; ++p) {
    if (p + 1 < s + n && (static_cast<unsigned char>(p[1]) & 0xE0) == 0xA0) return true;
  }
  return false;
}

bool strings_are_utf8(const rapidjson::Value& v) {
  if (v.IsString()) return !holds_surrogate(v.GetString(), v.GetStringLength());
  if (v.IsArray()) {
    for (const auto& item : v.GetArray()) {
      if (!strings_are_utf8(item)) return false;
    }
  } else if (v.IsObject()) {
    for (const auto& m : v.GetObject()) {
      if (!strings_are_utf8(m.name) || !strings_are_utf8(m.value)) return false;
    }
  }
  return true;
}

}  // namespace

rapidjson::Document parse_body(const std::string& body) {
  // RapidJSON's in-memory stream reads NUL as the end of input, so "{...}\0garbage" would
  // parse as the object; a raw NUL is never valid JSON anywhere.
  if (const size_t nul = body.find('\0'); nul != std::string::npos) {
    throw ApiError(400, "Invalid JSON body: a NUL byte at byte " + std::to_string(nul));
  }
  if (nesting_depth(body) > kMaxJsonDepth) {
    throw ApiError(400, "JSON body nested deeper than " + std::to_string(kMaxJsonDepth) + " levels");
  }
  rapidjson::Document doc;
  // Invalid UTF-8 is rejected here so it can never reach responses or the tokenizer; the
  // iterative parser keeps the parse itself off the call stack.
  doc.Parse<rapidjson::kParseValidateEncodingFlag | rapidjson::kParseIterativeFlag>(body.data(), body.size());
  if (doc.HasParseError()) {
    throw ApiError(400, std::string("Invalid JSON body: ") + rapidjson::GetParseError_En(doc.GetParseError()) +
                            " (at byte " + std::to_string(doc.GetErrorOffset()) + ")");
  }
  if (!strings_are_utf8(doc)) {
    throw ApiError(400, "Invalid JSON body: a string holds an unpaired UTF-16 surrogate escape");
  }
  if (!doc.IsObject()) throw ApiError(400, "The request body must be a JSON object");
  return doc;
}

}  // namespace ds::openai
