// The JSON text of a value as a client would send it: compact (rapidjson's writer), or with
// Python json.dumps' default separators ", " and ": " outside strings. What the MaskBench slice
// test and deltaserve-bench-grammar feed the matcher for each instance.
#pragma once

#include <rapidjson/document.h>

#include <string>

namespace ds::structured {

std::string json_text(const rapidjson::Value& v, bool python_separators);

}  // namespace ds::structured
