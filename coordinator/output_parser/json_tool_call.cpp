#include "coordinator/output_parser/json_tool_call.h"

#include <rapidjson/memorystream.h>

#include "coordinator/output_parser/json_forward.h"

namespace ds {
namespace {

// SAX handler that picks "name" out of the top-level object and copies the "arguments"
// value into a writer, so the arguments keep their key order and number spelling.
enum class ArgsKind { kNone, kObject, kString, kBad };

class CallHandler {
 public:
  CallHandler() : writer_(buf_), forward_{&writer_} {}

  bool Null() {
    return scalar([&] { return forward_.Null(); });
  }
  bool Bool(bool b) {
    return scalar([&] { return forward_.Bool(b); });
  }
  bool Int(int) { return false; }  // numbers always arrive as RawNumber (parse flags)
  bool Uint(unsigned) { return false; }
  bool Int64(int64_t) { return false; }
  bool Uint64(uint64_t) { return false; }
  bool Double(double) { return false; }
  bool RawNumber(const char* s, rapidjson::SizeType n, bool c) {
    return scalar([&] { return forward_.RawNumber(s, n, c); });
  }
  bool String(const char* s, rapidjson::SizeType n, bool c);
  bool Key(const char* s, rapidjson::SizeType n, bool c);
  bool StartObject() { return open(true); }
  bool StartArray() { return open(false); }
  bool EndObject(rapidjson::SizeType n) {
    return close([&] { return forward_.EndObject(n); });
  }
  bool EndArray(rapidjson::SizeType n) {
    return close([&] { return forward_.EndArray(n); });
  }

  std::optional<JsonToolCall> take() const;

 private:
  bool at_args_key() const { return depth_ == 1 && (key_ == "arguments" || key_ == "parameters"); }
  template <class Write>
  bool scalar(Write write) {
    if (capture_depth_ > 0) return write();
    if (depth_ == 0) return false;  // root must be an object
    return !at_args_key() || set_args(ArgsKind::kBad);
  }
  // Records what "arguments" holds; a second "arguments" makes the call malformed.
  bool set_args(ArgsKind kind) {
    if (args_ != ArgsKind::kNone) return false;
    args_ = kind;
    return true;
  }
  bool open(bool object);
  template <class Write>
  bool close(Write write) {
    --depth_;
    if (capture_depth_ == 0) return true;
    if (depth_ < capture_depth_) capture_depth_ = 0;
    return write();
  }

  rapidjson::StringBuffer buf_;
  JsonWriter writer_;
  JsonForward forward_;
  int depth_ = 0;
  int capture_depth_ = 0;  // depth of the arguments container while copying it, else 0
  std::string key_;
  std::string name_;
  std::string args_string_;
  ArgsKind args_ = ArgsKind::kNone;
};

bool CallHandler::String(const char* s, rapidjson::SizeType n, bool c) {
  if (capture_depth_ > 0) return forward_.String(s, n, c);
  if (depth_ == 0) return false;
  if (depth_ == 1 && key_ == "name") name_.assign(s, n);
  if (at_args_key()) {
    // Some models double-encode: "arguments": "{\"a\": 1}". Keep that string as is.
    args_string_.assign(s, n);
    return set_args(ArgsKind::kString);
  }
  return true;
}

bool CallHandler::Key(const char* s, rapidjson::SizeType n, bool c) {
  if (capture_depth_ > 0) return forward_.Key(s, n, c);
  if (depth_ == 1) key_.assign(s, n);
  return true;
}

bool CallHandler::open(bool object) {
  if (capture_depth_ > 0) {
    ++depth_;
    return object ? forward_.StartObject() : forward_.StartArray();
  }
  if (depth_ == 0 && !object) return false;
  if (at_args_key()) {
    if (!set_args(object ? ArgsKind::kObject : ArgsKind::kBad)) return false;
    capture_depth_ = depth_ + 1;
    ++depth_;
    return object ? forward_.StartObject() : forward_.StartArray();
  }
  ++depth_;
  return true;
}

std::optional<JsonToolCall> CallHandler::take() const {
  if (name_.empty() || args_ == ArgsKind::kBad) return std::nullopt;
  JsonToolCall call{name_, "{}"};
  if (args_ == ArgsKind::kString) call.arguments = args_string_;
  if (args_ == ArgsKind::kObject) call.arguments.assign(buf_.GetString(), buf_.GetSize());
  return call;
}

}  // namespace

std::optional<JsonToolCall> parse_json_tool_call(std::string_view body) {
  if (body.find('\0') != std::string_view::npos) return std::nullopt;
  CallHandler handler;
  rapidjson::MemoryStream in(body.data(), body.size());
  rapidjson::Reader reader;
  if (reader.Parse<kJsonForwardParseFlags>(in, handler).IsError()) return std::nullopt;
  return handler.take();
}

}  // namespace ds
