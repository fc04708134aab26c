// JSON text helpers for tool-call arguments. Values are re-serialized through RapidJSON's
// SAX interface so key order and the exact spelling of numbers survive (a DOM round trip
// would turn 1.50 into 1.5 and big integers into doubles).
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace ds {

// `s` as a JSON string literal, quotes included.
std::string json_quote(std::string_view s);

// When `text` is exactly one JSON value (surrounding whitespace allowed), that value in
// compact form; otherwise nullopt.
std::optional<std::string> compact_json(std::string_view text);

}  // namespace ds
