// Per-keyword tests: valid instances accepted (byte by byte and token by token with the real
// tokenizer, the mask agreeing with accept_token at every step), invalid ones rejected.
#include <gtest/gtest.h>

#include "tests/coordinator/structured/structured_test_util.h"

namespace ds::structured::test {
namespace {

void check(const std::string& schema_json, const std::vector<std::string>& valid,
           const std::vector<std::string>& invalid) {
  auto g = schema(schema_json);
  for (const auto& v : valid) {
    EXPECT_TRUE(accepts_bytes(g, v)) << schema_json << " should accept " << v;
    EXPECT_TRUE(accepts_qwen(g, v)) << schema_json << " should accept (tokens) " << v;
  }
  for (const auto& v : invalid) {
    EXPECT_FALSE(accepts_bytes(g, v)) << schema_json << " should reject " << v;
    EXPECT_FALSE(accepts_qwen(g, v)) << schema_json << " should reject (tokens) " << v;
  }
}

TEST(JsonSchema, Types) {
  check(R"({"type":"integer"})", {"0", "-12", "12345678901234567890"}, {"01", "1.5", "\"1\"", "-", " 1"});
  check(R"({"type":"number"})", {"0", "-1.5", "1e10", "2.5E-3"}, {"1.", ".5", "01", "1e", "true"});
  check(R"({"type":"string"})", {R"("")", R"("a b")", R"("\"\\\/\b\f\n\r\t\u00e9")", "\"é漢\""},
        {R"("a)", "\"a\nb\"", R"("\x")", R"("\u12")", "\"\xC3\""});
  check(R"({"type":"boolean"})", {"true", "false"}, {"1", "tru", "null"});
  check(R"({"type":"null"})", {"null"}, {"nul", "0"});
  check(R"({"type":["integer","null"]})", {"3", "null"}, {"\"3\"", "true"});
  check(R"({"type":"string","nullable":true})", {"\"x\"", "null"}, {"1"});
  check(R"(true)", {"1", "{\"a\":[1,{}]}", "\"x\"", "null"}, {"{", "[1,]"});
  check(R"({})", {"[]", "{}", "-0.5"}, {"{]"});
}

TEST(JsonSchema, PropertiesRequiredAdditional) {
  const std::string s = R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"}},
                            "required":["a"]})";
  check(s, {R"({"a":1})", R"({"b":"x","a":2})", R"({"a":1,"b":"x","c":[true]})", R"({ "a" : 1 , "b" : "y" })"},
        {R"({})", R"({"b":"x"})", R"({"a":"1"})", R"({"a":1,"b":2})", R"({"a":1,})", R"({,"a":1})"});
  check(R"({"properties":{"a":{"type":"integer"}},"additionalProperties":false})", {"{}", R"({"a":5})", "7"},
        {R"({"b":1})", R"({"a":5,"ab":1})"});
  check(R"({"type":"object","additionalProperties":{"type":"integer"}})", {R"({"x":1,"y":2})", "{}"}, {R"({"x":"1"})"});
  check(R"({"type":"object","required":["a","b","c"]})", {R"({"c":1,"a":2,"b":3})", R"({"a":1,"b":2,"c":3})"},
        {R"({"a":1,"b":2})", R"({"c":1,"c":2,"b":3})"});
}

TEST(JsonSchema, ManyRequiredPropertiesAnyOrder) {
  std::string props, req, inst, rev, short9;
  for (int i = 0; i < 10; ++i) {
    const std::string k = "k" + std::to_string(i);
    props += (i ? "," : "") + ("\"" + k + "\":{\"type\":\"integer\"}");
    req += (i ? "," : "") + ("\"" + k + "\"");
    inst += (i ? "," : "") + ("\"" + k + "\":" + std::to_string(i));
    rev = ("\"" + k + "\":" + std::to_string(i)) + (i ? "," : "") + rev;
    if (i < 9) short9 += (i ? "," : "") + ("\"" + k + "\":" + std::to_string(i));
  }
  const std::string s = "{\"type\":\"object\",\"properties\":{" + props + "},\"required\":[" + req + "]}";
  // More than 8 required: counted, any order (see json_schema_compiler.h).
  check(s, {"{" + inst + "}", "{" + rev + "}", "{" + inst + ",\"extra\":null}"}, {"{\"k0\":0}", "{" + short9 + "}"});
}

TEST(JsonSchema, EnumConst) {
  check(R"({"enum":["red","green",3,null,{"a":[1,2]}]})",
        {R"("red")", "3", "null", R"({"a":[1,2]})", R"({ "a" : [ 1 , 2 ] })"},
        {R"("blue")", "4", R"({"a":[1]})", R"("re")"});
  check(R"({"const":"x\"y"})", {R"("x\"y")"}, {R"("x")", R"("xy")"});
  check(R"({"type":"string","enum":["a",1]})", {R"("a")"}, {"1"});
}

TEST(JsonSchema, AnyOfOneOfAllOf) {
  check(R"({"anyOf":[{"type":"integer"},{"type":"string","maxLength":2}]})", {"1", R"("ab")"}, {R"("abc")", "true"});
  check(R"({"oneOf":[{"type":"boolean"},{"type":"null"}]})", {"true", "null"}, {"1"});
  check(R"({"allOf":[{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]},
                     {"properties":{"b":{"type":"string"}},"required":["b"]}]})",
        {R"({"a":1,"b":"x"})", R"({"b":"x","a":1})"}, {R"({"a":1})", R"({"a":1,"b":2})"});
  check(R"({"allOf":[{"minimum":3},{"maximum":5}],"type":"integer"})", {"3", "4", "5"}, {"2", "6"});
  check(R"({"type":"object","properties":{"k":{"type":"string"}},"anyOf":[{"required":["k"]},{"required":["j"]}]})",
        {R"({"k":"v"})", R"({"j":0})"}, {R"({})", R"({"k":1})"});
}

TEST(JsonSchema, RefRecursion) {
  const std::string s = R"({"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer"},
      "kids":{"type":"array","items":{"$ref":"#/$defs/node"}}},"required":["v"],"additionalProperties":false}},
      "$ref":"#/$defs/node"})";
  check(s, {R"({"v":1})", R"({"v":1,"kids":[{"v":2,"kids":[{"v":3}]},{"v":4}]})"},
        {R"({"v":1,"kids":[{}]})", R"({"v":1,"kids":[{"v":2,"x":1}]})"});
  check(R"({"definitions":{"a":{"type":"integer"}},"type":"array","items":{"$ref":"#/definitions/a"}})", {"[1,2]"},
        {"[\"1\"]"});
  check(R"({"type":"object","properties":{"self":{"$ref":"#"}}})", {R"({"self":{"self":{}}})"}, {R"({"self":1})"});
}

TEST(JsonSchema, Arrays) {
  check(R"({"type":"array","items":{"type":"integer"},"minItems":1,"maxItems":3})", {"[1]", "[1,2,3]", "[ 1 , 2 ]"},
        {"[]", "[1,2,3,4]", "[1,]", "[\"a\"]"});
  check(R"({"type":"array","prefixItems":[{"type":"string"},{"type":"integer"}],"items":false})",
        {"[]", R"(["a"])", R"(["a",1])"}, {R"(["a",1,2])", R"([1])"});
  check(R"({"type":"array","items":[{"type":"string"}],"additionalItems":{"type":"null"}})", {R"(["a",null,null])"},
        {R"(["a",1])"});
  check(R"({"type":"array","minItems":2})", {"[1,{}]", "[[],[],[]]"}, {"[1]", "[]"});
}

TEST(JsonSchema, Strings) {
  check(R"({"type":"string","minLength":2,"maxLength":3})", {R"("ab")", R"("abc")", "\"é漢\"", R"("\n\t")"},
        {R"("a")", R"("abcd")"});
  check(R"({"type":"string","pattern":"^[a-z]+-\\d{2}$"})", {R"("ab-12")"}, {R"("ab-1")", R"("Ab-12")", R"("ab-123")"});
  check(R"({"type":"string","pattern":"oo"})", {R"("foo")", R"("oops")"}, {R"("fo")"});
  check(R"({"type":"string","pattern":"^a\"b$"})", {R"("a\"b")"}, {R"("ab")"});
}

TEST(JsonSchema, Formats) {
  check(R"({"type":"string","format":"date"})", {R"("2024-02-29")"}, {R"("2024-13-01")", R"("24-01-01")"});
  check(R"({"type":"string","format":"date-time"})", {R"("2024-02-29T12:30:00Z")", R"("2024-02-29T12:30:00.5+01:00")"},
        {R"("2024-02-29 12:30")", R"("2024-02-29T25:00:00Z")"});
  check(R"({"type":"string","format":"time"})", {R"("23:59:59Z")"}, {R"("23:59")"});
  check(R"({"type":"string","format":"uuid"})", {R"("123e4567-e89b-12d3-a456-426614174000")"},
        {R"("123e4567e89b12d3a456426614174000")"});
  check(R"({"type":"string","format":"email"})", {R"("a@b.c")"}, {R"("ab.c")"});
  check(R"({"type":"string","format":"ipv4"})", {R"("192.168.0.1")"}, {R"("256.1.1.1")", R"("1.2.3")"});
  check(R"({"type":"string","format":"no-such-format"})", {R"("anything")"}, {});
}

TEST(JsonSchema, NumericBounds) {
  check(R"({"type":"integer","minimum":-5,"maximum":120})", {"-5", "0", "-0", "9", "99", "120"},
        {"-6", "121", "1000", "-10"});
  check(R"({"type":"integer","exclusiveMinimum":0})", {"1", "1000000"}, {"0", "-1"});
  check(R"({"type":"integer","minimum":10,"exclusiveMaximum":true,"maximum":20})", {"10", "19"}, {"20", "9"});
  check(R"({"type":"number","minimum":0,"maximum":1})", {"0", "0.5", "1", "1.0"}, {"-0.1", "1.5", "2"});
  check(R"({"type":"number","exclusiveMinimum":0})", {"0.001", "3"}, {"0", "0.0", "-1"});
  check(R"({"type":"number","minimum":-2,"exclusiveMaximum":-1})", {"-2", "-1.5"}, {"-1", "-2.5", "0"});
}

TEST(JsonSchema, Annotations) {
  check(R"({"$schema":"x","$id":"y","title":"t","description":"d","examples":[1],"default":2,"$comment":"c",
            "x-custom":{"not":1},"type":"integer"})",
        {"1"}, {"\"1\""});
}

TEST(JsonSchema, RefusedKeywordsAreNamed) {
  for (const char* kw :
       {"not", "if", "uniqueItems", "multipleOf", "minProperties", "contains", "propertyNames", "dependentRequired"}) {
    std::string value = R"({"type":"integer"})";
    if (std::string(kw) == "uniqueItems") value = "true";
    if (std::string(kw) == "multipleOf" || std::string(kw) == "minProperties") value = "2";
    if (std::string(kw) == "dependentRequired") value = R"({"a":{}})";
    const std::string s = std::string("{\"") + kw + "\":" + value + "}";
    try {
      schema(s);
      ADD_FAILURE() << "no SchemaError for " << s;
    } catch (const SchemaError& e) {
      EXPECT_EQ(e.keyword, kw);
    }
  }
  auto expect_kw = [](const std::string& s, const std::string& kw) {
    try {
      schema(s);
      ADD_FAILURE() << "no SchemaError for " << s;
    } catch (const SchemaError& e) {
      EXPECT_EQ(e.keyword, kw) << e.what();
    }
  };
  expect_kw(R"({"$ref":"other.json#/a"})", "$ref");
  expect_kw(R"({"$ref":"#/definitions/missing"})", "$ref");
  expect_kw(R"({"type":"string","pattern":"(?=a)b"})", "pattern");
  expect_kw(R"({"type":"string","pattern":"(a)\\1"})", "pattern");
  expect_kw(R"({"type":"string","format":"ipv6"})", "format");
  expect_kw(R"({"type":"number","minimum":0.5})", "minimum");
  expect_kw(R"({"allOf":[{"pattern":"a"},{"pattern":"b"}]})", "allOf");
  expect_kw(R"({"type":"integer","enum":["a"]})", "$unsatisfiable");
  expect_kw(R"({"properties":{"not":{"not":{"required":["a"]}}}})", "not");
  expect_kw(R"({"type":"number","not":{"type":"integer"}})", "not");
}

TEST(JsonSchema, PatternProperties) {
  // Anchored and search patterns; keys matching no pattern are unconstrained.
  check(R"({"type":"object","patternProperties":{"^x-":{"type":"integer"}}})",
        {"{}", R"({"x-a":1})", R"({"y":"s"})", R"({"ax-":"s","x-":2})"}, {R"({"x-a":"1"})", R"({"y":1,"x-b":[]})"});
  check(R"({"type":"object","patternProperties":{"id":{"type":"string"}}})", {R"({"my_id_1":"a","x":1})"},
        {R"({"my_id_1":1})", R"({"id":null})"});
  // With properties and additionalProperties false: declared names, pattern keys, nothing else.
  check(R"({"type":"object","properties":{"name":{"type":"string"}},"patternProperties":{"^[0-9]+$":{"type":"boolean"}},
            "additionalProperties":false})",
        {R"({"name":"a","12":true})", R"({"1":false,"2":true})", "{}"},
        {R"({"x":1})", R"({"12":1})", R"({"name":1})", R"({"1a":true})", R"({"name":"a","name":"b"})"});
  // A declared name matching a pattern satisfies both.
  check(R"({"type":"object","properties":{"ab":{"type":"integer"}},"patternProperties":{"^a":{"minimum":5}}})",
        {R"({"ab":7})", R"({"ac":"x","ab":5})", R"({"b":1})"}, {R"({"ab":3})", R"({"ab":"x"})", R"({"ac":2})"});
  // A key matching several patterns satisfies all of them.
  check(R"({"type":"object","patternProperties":{"^a":{"type":"integer"},"b$":{"minimum":10}}})",
        {R"({"ab":12})", R"({"a":5})", R"({"b":"s"})", R"({"b":11,"a":1})"},
        {R"({"ab":5})", R"({"ab":"s"})", R"({"b":5})", R"({"a":"s"})"});
  // additionalProperties applies to keys matching neither names nor patterns.
  check(R"({"type":"object","patternProperties":{"^s_":{"type":"string"},"^t_":{"type":"string"}},
            "additionalProperties":{"type":"integer"}})",
        {R"({"s_a":"x","n":1,"t_":"y"})", "{}"}, {R"({"s_a":1})", R"({"t_b":1})", R"({"n":"x"})"});
  // A required name that only a pattern admits.
  check(
      R"({"type":"object","required":["x1"],"patternProperties":{"^x":{"type":"integer"}},"additionalProperties":false})",
      {R"({"x1":1})", R"({"x2":2,"x1":1})"}, {"{}", R"({"x1":"a"})", R"({"x2":1})", R"({"x1":1,"y":1})"});
  // allOf: a pattern of one branch applies to a name declared in another.
  check(
      R"({"type":"object","allOf":[{"patternProperties":{"^a":{"type":"integer"}}},{"properties":{"ab":{"minimum":3}}}]})",
      {R"({"ab":4})", R"({"b":"x"})"}, {R"({"ab":2})", R"({"ab":"x"})", R"({"ac":"x"})"});
  check(R"({"allOf":[{"patternProperties":{"^a":{"type":"integer"}}},{"patternProperties":{"^a":{"minimum":3}}}]})",
        {R"({"ab":4})"}, {R"({"ab":2})", R"({"ab":"x"})"});
  for (const char* s :
       {R"({"allOf":[{"additionalProperties":false},{"patternProperties":{"^a":{}}}]})",
        R"({"allOf":[{"patternProperties":{"^a":{}},"additionalProperties":false},{"properties":{"b":{}}}]})",
        R"j({"type":"object","patternProperties":{"(?=a)":{}}})j"}) {
    try {
      schema(s);
      ADD_FAILURE() << "no SchemaError for " << s;
    } catch (const SchemaError& e) {
      EXPECT_EQ(e.keyword, "patternProperties") << e.what();
    }
  }
}

TEST(JsonSchema, BudgetFailsClosed) {
  GrammarOptions opt;
  opt.max_states = 1000;
  try {
    schema(R"({"type":"string","maxLength":5000})", opt);
    ADD_FAILURE() << "budget not enforced";
  } catch (const SchemaError& e) {
    EXPECT_EQ(e.keyword, "$budget");
  }
}

}  // namespace
}  // namespace ds::structured::test
