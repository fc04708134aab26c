#include "coordinator/http/api_error.h"

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

namespace ds {

ApiError::ApiError(int status, std::string message, std::string param, std::string code, std::string type)
    : std::runtime_error(std::move(message)),
      status_(status),
      param_(std::move(param)),
      code_(std::move(code)),
      type_(type.empty() ? default_error_type(status) : std::move(type)) {}

const char* default_error_type(int status) {
  if (status == 401) return "authentication_error";
  if (status >= 500) return "server_error";
  return "invalid_request_error";
}

namespace {

void string_or_null(rapidjson::Writer<rapidjson::StringBuffer>& w, std::string_view s) {
  if (s.empty()) {
    w.Null();
  } else {
    w.String(s.data(), static_cast<rapidjson::SizeType>(s.size()));
  }
}

}  // namespace

std::string error_json(std::string_view message, std::string_view type, std::string_view param, std::string_view code) {
  rapidjson::StringBuffer sb;
  rapidjson::Writer<rapidjson::StringBuffer> w(sb);
  w.StartObject();
  w.Key("error");
  w.StartObject();
  w.Key("message");
  w.String(message.data(), static_cast<rapidjson::SizeType>(message.size()));
  w.Key("type");
  w.String(type.data(), static_cast<rapidjson::SizeType>(type.size()));
  w.Key("param");
  string_or_null(w, param);
  w.Key("code");
  string_or_null(w, code);
  w.EndObject();
  w.EndObject();
  return std::string(sb.GetString(), sb.GetSize());
}

HttpResponse error_response(const ApiError& e) {
  HttpResponse r;
  r.status = e.status();
  r.body = error_json(e.what(), e.type(), e.param(), e.code());
  return r;
}

HttpResponse error_response(int status, std::string message, std::string param, std::string code) {
  return error_response(ApiError(status, std::move(message), std::move(param), std::move(code)));
}

}  // namespace ds
