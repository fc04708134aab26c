// Regular expressions over code points, lowered to byte automata over the JSON-encoded form of
// a string's content (so `"` and `\` appear as escapes, control characters as short or \u
// escapes).
//
// Supported pattern subset (ECMA 262 / Python `re` common ground): literals, `.`, classes
// `[...]` / `[^...]` with ranges, \d \w \s (ASCII) and their negations, \t \n \r \f \v \0
// \xHH \uHHHH, escaped punctuation, groups `( )`, `(?: )`, `(?<name> )`, `(?P<name> )`,
// alternation, quantifiers * + ? {n} {n,} {n,m} (lazy forms too: same language), and `^` / `$`
// at the start / end of a top-level alternative. Unanchored sides match anywhere (JSON Schema
// `pattern` is a search). Refused (SchemaError naming "pattern"): lookaround, backreferences,
// \b \B, \p{..}, inline flags, anchors elsewhere.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <utility>
#include <vector>

#include "coordinator/structured/automaton.h"

namespace ds::structured {

// Sorted, disjoint, inclusive code point ranges.
using CpSet = std::vector<std::pair<uint32_t, uint32_t>>;

CpSet cp_all();  // U+0000..U+10FFFF without surrogates
CpSet cp_complement(const CpSet& s);

// One JSON-encoded character from `s`: raw UTF-8 for characters JSON allows raw; `\"`, `\\`,
// short escapes and `\u00XX` for the ones it does not. With `all_escapes`, every \uXXXX escape
// and `\/` are also allowed (generic strings).
ExprPtr json_char(const CpSet& s, bool all_escapes);

// Byte automaton of a JSON string's content (without the quotes) whose decoded text matches
// `pattern` (search semantics unless anchored). Throws std::invalid_argument with the reason.
ExprPtr pattern_to_json_content(std::string_view pattern);

// build_dfa(pattern_to_json_content(pattern)), cached process-wide (thread-safe).
std::shared_ptr<const Dfa> json_content_dfa(std::string_view pattern, Budget& budget);

// Byte automaton of raw text (not JSON-encoded) matching `pattern` in full (for compile_regex).
ExprPtr pattern_to_raw(std::string_view pattern);

}  // namespace ds::structured
