// Conversion of one XML tool-call parameter (raw model text) into a JSON value, guided by
// the JSON-schema types the tool declares for it.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace ds {

// JSON text for `raw` given the allowed `types` (empty = unknown parameter or tool).
// "string" keeps the raw text verbatim; integer/number/boolean/null/object/array are used
// when the text really is such a value; otherwise, and for unknown types, the text is taken
// as JSON when it parses and as a string when it does not.
std::string convert_param_value(std::string_view raw, const std::vector<std::string>& types);

}  // namespace ds
