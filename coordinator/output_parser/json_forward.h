// A RapidJSON SAX handler that copies events into a Writer. Numbers are parsed with
// kParseNumbersAsStringsFlag and written back verbatim; RapidJSON 1.1's Writer::RawNumber
// would quote them, so RawNumber goes through RawValue instead.
#pragma once

#include <rapidjson/reader.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

namespace ds {

using JsonWriter = rapidjson::Writer<rapidjson::StringBuffer>;

// Input flags for every parse whose events feed a JsonForward.
constexpr unsigned kJsonForwardParseFlags = rapidjson::kParseNumbersAsStringsFlag;

struct JsonForward {
  JsonWriter* w;

  bool Null() { return w->Null(); }
  bool Bool(bool b) { return w->Bool(b); }
  bool Int(int i) { return w->Int(i); }
  bool Uint(unsigned u) { return w->Uint(u); }
  bool Int64(int64_t i) { return w->Int64(i); }
  bool Uint64(uint64_t u) { return w->Uint64(u); }
  bool Double(double d) { return w->Double(d); }
  bool RawNumber(const char* s, rapidjson::SizeType n, bool) { return w->RawValue(s, n, rapidjson::kNumberType); }
  bool String(const char* s, rapidjson::SizeType n, bool) { return w->String(s, n); }
  bool StartObject() { return w->StartObject(); }
  bool Key(const char* s, rapidjson::SizeType n, bool) { return w->Key(s, n); }
  bool EndObject(rapidjson::SizeType n) { return w->EndObject(n); }
  bool StartArray() { return w->StartArray(); }
  bool EndArray(rapidjson::SizeType n) { return w->EndArray(n); }
};

}  // namespace ds
