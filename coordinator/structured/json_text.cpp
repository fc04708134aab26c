#include "coordinator/structured/json_text.h"

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

namespace ds::structured {

std::string json_text(const rapidjson::Value& v, bool python_separators) {
  rapidjson::StringBuffer sb;
  rapidjson::Writer<rapidjson::StringBuffer> w(sb);
  v.Accept(w);
  std::string s(sb.GetString(), sb.GetSize());
  if (!python_separators) return s;
  std::string out;
  bool in_str = false, esc = false;
  for (char c : s) {
    out.push_back(c);
    if (in_str) {
      if (esc) {
        esc = false;
      } else if (c == '\\') {
        esc = true;
      } else if (c == '"') {
        in_str = false;
      }
    } else if (c == '"') {
      in_str = true;
    } else if (c == ',' || c == ':') {
      out.push_back(' ');
    }
  }
  return out;
}

}  // namespace ds::structured
