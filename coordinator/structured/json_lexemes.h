// Lexemes of JSON text: whitespace runs, numbers (with exact integer ranges), string
// formats, and JSON string quoting.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "coordinator/structured/automaton.h"

namespace ds::structured {

ExprPtr ws_expr(uint32_t max_ws);
// -?(0|[1-9][0-9]*)
ExprPtr integer_expr();
// JSON number grammar, exponent included.
ExprPtr number_expr();
// Integers in [lo, hi] (either side open), canonical decimal form ("-0" when 0 is in range).
ExprPtr integer_range_expr(std::optional<int64_t> lo, std::optional<int64_t> hi);
// Numbers x with lo <(=) x <(=) hi for integer-valued bounds: -?I(.F)? without exponent.
ExprPtr number_range_expr(std::optional<int64_t> lo, bool lo_excl, std::optional<int64_t> hi, bool hi_excl,
                          Budget& budget);

enum class FormatSupport { Enforced, Ignored, Refused };
// The anchored pattern for an enforced format (decoded string text), or Ignored (formats the
// reference validator does not know: annotations) / Refused.
FormatSupport format_pattern(std::string_view format, std::string& pattern);

// JSON string literal (with quotes), escaped as RapidJSON's Writer does.
std::string json_quote(std::string_view s);

}  // namespace ds::structured

namespace ds::structured {
// Strings of min..max characters (max may be kUnbounded), each one a word of `one_char` (a DFA
// accepting exactly one character, accepting states without successors). Built directly as a
// counter x character-state product instead of max copies of an NFA.
std::shared_ptr<Dfa> length_dfa(const Dfa& one_char, uint32_t min, uint32_t max, Budget& budget);
}  // namespace ds::structured
