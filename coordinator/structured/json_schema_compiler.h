// JSON Schema -> Grammar. See docs in the .cpp header comment for the supported keywords.
//
// Supported: type (string or array; "integer" vs "number"; OpenAPI "nullable"), properties,
// required, additionalProperties (bool or schema; absent = any extra property, per the spec),
// enum, const, anyOf, oneOf (treated as anyOf), allOf (merged; what cannot be merged is refused
// naming "allOf"), $ref to local JSON pointers (#, #/definitions/.., #/$defs/.., recursion
// allowed), items / prefixItems / additionalItems (also draft-4 tuple items), minItems /
// maxItems, minLength / maxLength (code points; an escape counts as one), pattern (regex.h
// subset), format (date-time, date, time, uuid, email, ipv4, hostname, uri, uri-reference
// enforced; ipv6, regex, json-pointer, uri-template, duration, iri.. refused; formats the
// reference validator does not know are annotations), minimum / maximum / exclusive* (integers
// exact; numbers exact for integer-valued bounds, bounded numbers are written without
// exponent; a fractional bound on a number is refused).
// not: only `not {}` / `not true` (nothing matches) and `not {type: ...}` (those types removed;
// not {type: integer} on numbers is refused).
// patternProperties: a key matching a pattern (search semantics, regex.h subset, matched on the
// key's JSON spelling) has a value valid for that pattern's schema, and for every pattern it
// matches (at most 4 distinct pattern schemas); a declared property matching patterns must
// satisfy them too; additionalProperties applies to keys matching neither names nor patterns
// (then only canonically escaped keys are admitted: the spelling patterns are matched on).
// Refused (SchemaError naming the keyword): other not forms, if/then/else, uniqueItems,
// multipleOf, min/maxProperties, dependencies, dependent*, propertyNames, contains,
// unevaluated*, $dynamicRef, $recursiveRef, non-local $ref.
// Ignored: annotations (title, description, examples, default, $schema, $id, $comment, ...)
// and unknown keywords (no validation meaning).
//
// Object members may come in any order. With at most 8 declared properties each appears at most
// once (so an object is bounded); otherwise declared members may repeat and required properties
// are tracked exactly as a set when there are at most 8 of them. With more, the grammar counts required members
// (any order): exact for objects without duplicate keys, but an object repeating a required key
// can pass with another one missing (JSON leaves duplicate names undefined; RFC 8259 §4).
// Property names are matched on their raw (unescaped) spelling.
// oneOf is compiled as anyOf only when its branches are provably disjoint (different JSON
// types, or objects told apart by a required property with disjoint const / enum values, or
// by additionalProperties false); otherwise it is refused naming "oneOf".
#pragma once

#include <rapidjson/document.h>

#include <memory>

#include "coordinator/structured/grammar.h"

namespace ds::structured {

std::shared_ptr<const Grammar> compile_json_schema(const rapidjson::Value& schema, const GrammarOptions& opt = {});
// Defines inside `builder` a rule matching the JSON values `schema` accepts and returns its id
// (for grammars that embed JSON values, e.g. tool-call parameters). $ref resolves against
// `root`, the enclosing document; `schema` is usually a value inside it but may live elsewhere.
// Whitespace per opt.max_ws; the builder's budget applies. Rules are defined eagerly, so root
// and schema need not outlive the call. Throws SchemaError.
int32_t define_json_schema_rule(GrammarBuilder& builder, const rapidjson::Value& root, const rapidjson::Value& schema,
                                const GrammarOptions& opt = {});
// Any JSON object (response_format json_object).
std::shared_ptr<const Grammar> compile_json_object(const GrammarOptions& opt = {});
// Any JSON value.
std::shared_ptr<const Grammar> compile_json_value(const GrammarOptions& opt = {});

}  // namespace ds::structured
