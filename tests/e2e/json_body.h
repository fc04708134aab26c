// JSON helpers of the end-to-end tests that build request bodies by hand and read replies.
#pragma once

#include <gtest/gtest.h>
#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <string>

namespace ds::test {

// The reply body as a document; a parse error fails the calling test (with the body's start).
inline rapidjson::Document parse_json_body(const std::string& body) {
  rapidjson::Document d;
  d.Parse(body.c_str());
  EXPECT_FALSE(d.HasParseError()) << body.substr(0, 400);
  return d;
}

// `s` as a JSON string literal, quotes and escapes included.
inline std::string json_string(const std::string& s) {
  rapidjson::StringBuffer sb;
  rapidjson::Writer<rapidjson::StringBuffer> w(sb);
  w.String(s.data(), static_cast<rapidjson::SizeType>(s.size()));
  return sb.GetString();
}

}  // namespace ds::test
