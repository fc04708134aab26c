// Exceptions of the chat-template engine and of the OpenAI request conversion.
// The HTTP layer maps RequestError and TemplateRaise to an OpenAI 400 `invalid_request_error`;
// TemplateError means the template itself is broken or ran past a limit (a server-side problem
// unless it was triggered by odd request data, e.g. tool arguments that are not a mapping).
#pragma once

#include <stdexcept>
#include <string>

namespace ds {

// Template syntax errors ("chat template 12:5: ...") and evaluation errors (type errors,
// runaway loops, output too large).
class TemplateError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The template called raise_exception(msg): the conversation is not acceptable to the model
// ("No user query found in messages."). what() is exactly the template's message.
class TemplateRaise : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The request JSON is malformed (missing role, bad content part, ...). what() is phrased for an
// OpenAI 400 `invalid_request_error` and names the offending field ("messages[2].role").
class RequestError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace ds
