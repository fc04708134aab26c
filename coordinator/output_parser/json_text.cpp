#include "coordinator/output_parser/json_text.h"

#include <rapidjson/memorystream.h>

#include "coordinator/output_parser/json_forward.h"

namespace ds {

std::string json_quote(std::string_view s) {
  rapidjson::StringBuffer buf;
  JsonWriter w(buf);
  w.String(s.data(), static_cast<rapidjson::SizeType>(s.size()));
  return std::string(buf.GetString(), buf.GetSize());
}

std::optional<std::string> compact_json(std::string_view text) {
  // MemoryStream reports NUL as end of input, which would silently drop the rest.
  if (text.find('\0') != std::string_view::npos) return std::nullopt;
  rapidjson::StringBuffer buf;
  JsonWriter w(buf);
  JsonForward forward{&w};
  rapidjson::MemoryStream in(text.data(), text.size());
  rapidjson::Reader reader;
  if (reader.Parse<kJsonForwardParseFlags>(in, forward).IsError() || !w.IsComplete()) return std::nullopt;
  return std::string(buf.GetString(), buf.GetSize());
}

}  // namespace ds
