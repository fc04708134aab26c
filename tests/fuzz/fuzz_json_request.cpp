// libFuzzer entry point for the JSON request reader: parse_body (NUL, depth, UTF-8 and
// surrogate rules), extra_body folding, the chat and completion parameter parsers and the chat
// message conversion. Any input must either be accepted or refused with the request layer's
// own errors (ApiError, RequestError); anything else escaping is a bug. Accepted bodies hold
// only valid UTF-8 strings.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "common/utf8.h"
#include "coordinator/chat_template/chat_input.h"
#include "coordinator/chat_template/errors.h"
#include "coordinator/http/api_error.h"
#include "coordinator/openai/json_fields.h"
#include "coordinator/openai/request.h"

namespace {

bool all_utf8(const rapidjson::Value& v) {
  if (v.IsString()) return ds::utf8::is_valid({v.GetString(), v.GetStringLength()});
  if (v.IsArray()) {
    for (const auto& x : v.GetArray()) {
      if (!all_utf8(x)) return false;
    }
  }
  if (v.IsObject()) {
    for (const auto& m : v.GetObject()) {
      if (!all_utf8(m.name) || !all_utf8(m.value)) return false;
    }
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string body(reinterpret_cast<const char*>(data), size);
  rapidjson::Document doc;
  try {
    doc = ds::openai::parse_body(body);
  } catch (const ds::ApiError&) {
    return 0;
  }
  if (!all_utf8(doc) || body.find('\0') != std::string::npos) std::abort();
  try {
    ds::openai::merge_extra_body(doc);
    (void)ds::openai::parse_completion_params(doc);
  } catch (const ds::ApiError&) {
  }
  try {
    (void)ds::openai::parse_chat_params(doc);
  } catch (const ds::ApiError&) {
  }
  try {
    (void)ds::chat_input_from_request(doc);
  } catch (const ds::RequestError&) {
  }
  return 0;
}
