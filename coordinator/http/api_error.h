// OpenAI-style error objects: {"error":{"message","type","param","code"}}. Every non-2xx reply
// of the server has this shape, including the ones produced below the OpenAI layer (404, 405,
// 401, 413) so clients can parse one format.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

#include "coordinator/http/http_types.h"

namespace ds {

// Thrown anywhere in request handling; the handler turns it into a reply.
class ApiError : public std::runtime_error {
 public:
  // `param` / `code` empty: JSON null. `type` empty: derived from the status.
  ApiError(int status, std::string message, std::string param = {}, std::string code = {}, std::string type = {});

  int status() const { return status_; }
  const std::string& param() const { return param_; }
  const std::string& code() const { return code_; }
  const std::string& type() const { return type_; }

 private:
  int status_;
  std::string param_;
  std::string code_;
  std::string type_;
};

// "invalid_request_error" for 4xx, "authentication_error" for 401, "server_error" for 5xx.
const char* default_error_type(int status);

std::string error_json(std::string_view message, std::string_view type, std::string_view param, std::string_view code);
HttpResponse error_response(const ApiError& e);
HttpResponse error_response(int status, std::string message, std::string param = {}, std::string code = {});

}  // namespace ds
