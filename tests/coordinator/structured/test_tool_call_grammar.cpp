// Tool-call grammars (tool_choice "required" / named function): the Qwen3.5 XML form is
// accepted byte by byte, malformed or mistyped calls are not, and whatever the grammar accepts
// the server's own output parser reads back as a call whose arguments satisfy the schema.
#include <gtest/gtest.h>
#include <rapidjson/document.h>

#include <string>
#include <vector>

#include "coordinator/output_parser/output_parser.h"
#include "coordinator/output_parser/tool_schema.h"
#include "coordinator/structured/tool_call_grammar.h"
#include "tests/coordinator/structured/structured_test_util.h"

namespace ds::structured::test {
namespace {

const char* kTools = R"([
 {"type":"function","function":{"name":"get_weather","parameters":{"type":"object",
   "properties":{"city":{"type":"string"},
                 "days":{"type":"integer","minimum":1,"maximum":14},
                 "unit":{"type":"string","enum":["celsius","fahrenheit"]},
                 "detailed":{"type":"boolean"}},
   "required":["city","days"],"additionalProperties":false}}},
 {"type":"function","function":{"name":"search","parameters":{"type":"object",
   "properties":{"query":{"type":"string","minLength":1,"maxLength":12},
                 "filters":{"type":"object","properties":{"lang":{"type":"string"},"max":{"type":"integer"}},
                            "required":["lang"],"additionalProperties":false},
                 "tags":{"type":"array","items":{"$ref":"#/$defs/tag"}},
                 "note":{"anyOf":[{"type":"string"},{"type":"null"}]},
                 "score":{"type":["number","null"]}},
   "required":["query"],"$defs":{"tag":{"type":"string","enum":["a","b"]}}}}},
 {"type":"function","function":{"name":"ping"}}
])";

rapidjson::Document parse_json(const std::string& s) {
  rapidjson::Document d;
  d.Parse(s.c_str());
  if (d.HasParseError()) ADD_FAILURE() << "bad JSON: " << s;
  return d;
}

std::shared_ptr<const Grammar> tool_grammar(const char* tools, ToolCallConstraint c = {}, GrammarOptions opt = {}) {
  const rapidjson::Document d = parse_json(tools);
  return compile_tool_calls(d, c, opt);
}

std::string param(const std::string& name, const std::string& value) {
  return "<parameter=" + name + ">\n" + value + "\n</parameter>\n";
}

std::string call(const std::string& name, const std::vector<std::pair<std::string, std::string>>& params) {
  std::string s = "<tool_call>\n<function=" + name + ">\n";
  for (const auto& [k, v] : params) s += param(k, v);
  return s + "</function>\n</tool_call>";
}

ParseResult parse_output(const char* tools, const std::string& text) {
  OutputParserOptions o;
  o.tools_enabled = true;
  o.tools = ToolSchemas::parse(tools);
  o.make_call_id = [] { return std::string("call_test"); };
  OutputParser p(std::move(o));
  p.feed(text);
  p.finish();
  return p.result();
}

// A small validator for the schema subset of kTools (type, enum, bounds, lengths, items,
// properties / required / additionalProperties, anyOf, local $ref): independent of the
// grammar, so that the round trip can catch the grammar accepting what the schema forbids.
bool valid(const rapidjson::Value& v, const rapidjson::Value& s, const rapidjson::Value& root);

bool type_ok(const rapidjson::Value& v, const std::string& t) {
  if (t == "string") return v.IsString();
  if (t == "integer") return v.IsInt64() || v.IsUint64();
  if (t == "number") return v.IsNumber();
  if (t == "boolean") return v.IsBool();
  if (t == "null") return v.IsNull();
  if (t == "object") return v.IsObject();
  if (t == "array") return v.IsArray();
  return false;
}

bool object_ok(const rapidjson::Value& v, const rapidjson::Value& s, const rapidjson::Value& root) {
  const auto props = s.FindMember("properties");
  for (const auto& m : v.GetObject()) {
    const bool declared = props != s.MemberEnd() && props->value.HasMember(m.name);
    if (!declared && s.HasMember("additionalProperties")) return false;  // kTools only uses false
    if (declared && !valid(m.value, props->value[m.name], root)) return false;
  }
  if (auto r = s.FindMember("required"); r != s.MemberEnd())
    for (const auto& n : r->value.GetArray())
      if (!v.HasMember(n)) return false;
  return true;
}

bool valid(const rapidjson::Value& v, const rapidjson::Value& s, const rapidjson::Value& root) {
  if (auto r = s.FindMember("$ref"); r != s.MemberEnd()) {
    const std::string ref = r->value.GetString();  // "#/$defs/NAME"
    return valid(v, root["$defs"][ref.substr(8).c_str()], root);
  }
  if (auto a = s.FindMember("anyOf"); a != s.MemberEnd()) {
    for (const auto& b : a->value.GetArray())
      if (valid(v, b, root)) return true;
    return false;
  }
  if (auto t = s.FindMember("type"); t != s.MemberEnd()) {
    bool ok = false;
    if (t->value.IsString()) ok = type_ok(v, t->value.GetString());
    if (t->value.IsArray())
      for (const auto& x : t->value.GetArray()) ok = ok || type_ok(v, x.GetString());
    if (!ok) return false;
  }
  if (auto e = s.FindMember("enum"); e != s.MemberEnd()) {
    bool ok = false;
    for (const auto& x : e->value.GetArray()) ok = ok || x == v;
    if (!ok) return false;
  }
  if (v.IsNumber()) {
    if (auto m = s.FindMember("minimum"); m != s.MemberEnd() && v.GetDouble() < m->value.GetDouble()) return false;
    if (auto m = s.FindMember("maximum"); m != s.MemberEnd() && v.GetDouble() > m->value.GetDouble()) return false;
  }
  if (v.IsString()) {  // kTools' strings are ASCII: bytes = code points
    if (auto m = s.FindMember("minLength"); m != s.MemberEnd() && v.GetStringLength() < m->value.GetUint())
      return false;
    if (auto m = s.FindMember("maxLength"); m != s.MemberEnd() && v.GetStringLength() > m->value.GetUint())
      return false;
  }
  if (v.IsArray() && s.HasMember("items"))
    for (const auto& x : v.GetArray())
      if (!valid(x, s["items"], root)) return false;
  if (v.IsObject()) return object_ok(v, s, root);
  return true;
}

// The parsed call of an accepted text must be valid for its function's parameters.
void expect_round_trip(const std::string& text) {
  const ParseResult r = parse_output(kTools, text);
  ASSERT_EQ(r.tool_calls.size(), 1u) << text;
  EXPECT_EQ(r.content, "") << text;
  const rapidjson::Document tools = parse_json(kTools);
  for (const auto& t : tools.GetArray()) {
    const auto& fn = t["function"];
    if (r.tool_calls[0].name != fn["name"].GetString()) continue;
    const rapidjson::Document args = parse_json(r.tool_calls[0].arguments);
    static const rapidjson::Value kEmpty(rapidjson::kObjectType);
    const rapidjson::Value& params = fn.HasMember("parameters") ? fn["parameters"] : kEmpty;
    EXPECT_TRUE(args.IsObject() && valid(args, params, params)) << text << "\n-> " << r.tool_calls[0].arguments;
    return;
  }
  ADD_FAILURE() << "unknown function " << r.tool_calls[0].name;
}

void expect_arguments(const std::string& text, const std::string& name, const std::string& args_json) {
  const ParseResult r = parse_output(kTools, text);
  ASSERT_EQ(r.tool_calls.size(), 1u) << text;
  EXPECT_EQ(r.tool_calls[0].name, name);
  EXPECT_EQ(parse_json(r.tool_calls[0].arguments), parse_json(args_json)) << r.tool_calls[0].arguments;
}

TEST(ToolCallGrammar, AcceptsTemplateFormAndParserReadsTypedArguments) {
  auto g = tool_grammar(kTools);
  struct Case {
    std::string text, name, args;
  };
  const std::vector<Case> cases = {
      {call("get_weather", {{"city", "Paris"}, {"days", "3"}}), "get_weather", R"({"city":"Paris","days":3})"},
      {call("get_weather", {{"city", "New York\nNY"}, {"days", "14"}, {"unit", "celsius"}, {"detailed", "true"}}),
       "get_weather", R"({"city":"New York\nNY","days":14,"unit":"celsius","detailed":true})"},
      {call("get_weather", {{"city", " <b>3</b> "}, {"days", "1"}, {"detailed", "false"}}), "get_weather",
       R"({"city":" <b>3</b> ","days":1,"detailed":false})"},
      {call("search", {{"query", "cats"}}), "search", R"({"query":"cats"})"},
      {call("search", {{"query", "q"}, {"filters", R"({"lang": "en", "max": 5})"}, {"tags", R"(["a","b"])"}}), "search",
       R"({"query":"q","filters":{"lang":"en","max":5},"tags":["a","b"]})"},
      {call("search", {{"query", "q"}, {"note", "null"}, {"score", "2.5"}}), "search",
       R"({"query":"q","note":null,"score":2.5})"},
      {call("search", {{"query", "q"}, {"note", "hello"}, {"score", "null"}}), "search",
       R"({"query":"q","note":"hello","score":null})"},
      {call("ping", {}), "ping", "{}"},
  };
  for (const auto& c : cases) {
    EXPECT_TRUE(accepts_bytes(g, c.text)) << c.text;
    expect_arguments(c.text, c.name, c.args);
  }
}

TEST(ToolCallGrammar, RejectsWrongFunctionName) {
  auto g = tool_grammar(kTools);
  EXPECT_FALSE(accepts_bytes(g, call("get_wether", {{"city", "Paris"}, {"days", "3"}})));
  EXPECT_FALSE(accepts_bytes(g, call("Ping", {})));
  ToolCallConstraint named;
  named.names = {"ping"};
  auto only_ping = tool_grammar(kTools, named);
  EXPECT_TRUE(accepts_bytes(only_ping, call("ping", {})));
  EXPECT_FALSE(accepts_bytes(only_ping, call("search", {{"query", "q"}})));
}

TEST(ToolCallGrammar, RejectsMissingRequiredParameters) {
  auto g = tool_grammar(kTools);
  EXPECT_FALSE(accepts_bytes(g, call("get_weather", {{"city", "Paris"}})));
  EXPECT_FALSE(accepts_bytes(g, call("get_weather", {{"days", "3"}})));
  EXPECT_FALSE(accepts_bytes(g, call("search", {})));
  EXPECT_FALSE(accepts_bytes(g, call("search", {{"query", "q"}, {"filters", R"({"max":5})"}})));
}

TEST(ToolCallGrammar, RejectsWronglyTypedValues) {
  auto g = tool_grammar(kTools);
  auto weather = [](const std::string& days) { return call("get_weather", {{"city", "Paris"}, {"days", days}}); };
  for (const char* days : {"three", "\"3\"", "3.5", "0", "15", "3 days", ""})
    EXPECT_FALSE(accepts_bytes(g, weather(days))) << days;
  EXPECT_FALSE(accepts_bytes(g, call("get_weather", {{"city", "P"}, {"days", "3"}, {"unit", "kelvin"}})));
  EXPECT_FALSE(accepts_bytes(g, call("get_weather", {{"city", "P"}, {"days", "3"}, {"detailed", "yes"}})));
  EXPECT_FALSE(accepts_bytes(g, call("search", {{"query", "q"}, {"tags", R"(["c"])"}})));
  EXPECT_FALSE(accepts_bytes(g, call("search", {{"query", "q"}, {"filters", R"({"lang":"en","x":1})"}})));
  EXPECT_FALSE(accepts_bytes(g, call("search", {{"query", "q"}, {"score", "high"}})));
  EXPECT_FALSE(accepts_bytes(g, call("search", {{"query", ""}})));               // minLength 1
  EXPECT_FALSE(accepts_bytes(g, call("search", {{"query", "thirteen char"}})));  // maxLength 12
}

TEST(ToolCallGrammar, ForbidsParameterCloseInsideStringValue) {
  auto g = tool_grammar(kTools);
  EXPECT_FALSE(accepts_bytes(g, call("get_weather", {{"city", "Pa</parameter>ris"}, {"days", "3"}})));
  EXPECT_TRUE(accepts_bytes(g, call("get_weather", {{"city", "Pa</parameterris"}, {"days", "3"}})));
  // The ban applies as the bytes arrive: after "</parameter" the '>' is refused.
  Matcher m(g, byte_vocab());
  ASSERT_TRUE(m.accept_bytes("<tool_call>\n<function=get_weather>\n<parameter=city>\nPa</parameter"));
  EXPECT_FALSE(m.accept_bytes(">"));
  EXPECT_TRUE(m.accept_bytes("s"));
}

// A JSON-valued parameter ends at </parameter> as a raw one does: no JSON string in it (values,
// keys, constrained or not) may hold the tag; escaped as <\/parameter> it reads back intact.
TEST(ToolCallGrammar, ForbidsParameterCloseInsideJsonStrings) {
  auto g = tool_grammar(kTools);
  const auto filters = [](const std::string& json) { return call("search", {{"query", "q"}, {"filters", json}}); };
  EXPECT_FALSE(accepts_bytes(g, filters(R"({"lang":"e</parameter>n"})")));
  EXPECT_TRUE(accepts_bytes(g, filters(R"({"lang":"e<\/parameter>n"})")));
  expect_arguments(filters(R"({"lang":"e<\/parameter>n"})"), "search",
                   R"({"query":"q","filters":{"lang":"e</parameter>n"}})");
  const char* kAny = R"([{"type":"function","function":{"name":"f","parameters":{"type":"object",
      "properties":{"o":{"type":"object"},"p":{"type":"string","pattern":"^a.*$"}}}}}])";
  auto any = tool_grammar(kAny);
  const auto f = [](const std::string& name, const std::string& json) { return call("f", {{name, json}}); };
  EXPECT_TRUE(accepts_bytes(any, f("o", R"({"k":["x</parameterx"]})")));
  EXPECT_FALSE(accepts_bytes(any, f("o", R"({"k":["x</parameter>"]})")));  // a value in any JSON
  EXPECT_FALSE(accepts_bytes(any, f("o", R"({"</parameter>":1})")));       // a key
  EXPECT_TRUE(accepts_bytes(any, f("p", "a</parameterb")));                // raw string: as before
  EXPECT_FALSE(accepts_bytes(any, f("p", "a</parameter>b")));
}

TEST(ToolCallGrammar, BoundsWhitespace) {
  GrammarOptions opt;
  opt.max_ws = 2;
  auto g = tool_grammar(kTools, {}, opt);
  auto filters = [](const std::string& json) { return call("search", {{"query", "q"}, {"filters", json}}); };
  EXPECT_TRUE(accepts_bytes(g, filters(R"({  "lang":"en"})")));
  EXPECT_FALSE(accepts_bytes(g, filters(R"({   "lang":"en"})")));
  // The layout itself is exact: no extra blank lines or spaces around the markup.
  std::string text = call("get_weather", {{"city", "Paris"}, {"days", "3"}});
  EXPECT_FALSE(accepts_bytes(g, std::string(text).insert(text.find("<parameter=days"), "\n")));
  EXPECT_FALSE(accepts_bytes(g, std::string(text).insert(text.find("</function>"), "   ")));
  EXPECT_FALSE(accepts_bytes(g, std::string(text).insert(text.find("\n3\n") + 1, " ")));
}

TEST(ToolCallGrammar, RejectsTextBeforeOrAfterTheCall) {
  auto g = tool_grammar(kTools);
  const std::string text = call("ping", {});
  EXPECT_TRUE(accepts_bytes(g, text));
  EXPECT_FALSE(accepts_bytes(g, "Sure! " + text));
  EXPECT_FALSE(accepts_bytes(g, "\n" + text));
  EXPECT_FALSE(accepts_bytes(g, text + "\n"));
  EXPECT_FALSE(accepts_bytes(g, text + " done"));
  Matcher m(g, byte_vocab());
  ASSERT_TRUE(m.accept_bytes(text));
  EXPECT_TRUE(m.terminated());  // only end-of-generation may follow
  EXPECT_TRUE(m.accept_token(byte_vocab_eos()));
}

TEST(ToolCallGrammar, ParallelCallsAreSeparatedByOneNewline) {
  const std::string two = call("ping", {}) + "\n" + call("search", {{"query", "q"}});
  EXPECT_FALSE(accepts_bytes(tool_grammar(kTools), two));
  ToolCallConstraint par;
  par.parallel = true;
  auto g = tool_grammar(kTools, par);
  EXPECT_TRUE(accepts_bytes(g, call("ping", {})));
  EXPECT_TRUE(accepts_bytes(g, two));
  EXPECT_FALSE(accepts_bytes(g, call("ping", {}) + call("ping", {})));
  EXPECT_FALSE(accepts_bytes(g, call("ping", {}) + "\n\n" + call("ping", {})));
  const ParseResult r = parse_output(kTools, two);
  ASSERT_EQ(r.tool_calls.size(), 2u);
  EXPECT_EQ(r.tool_calls[0].name, "ping");
  EXPECT_EQ(r.tool_calls[1].arguments, R"({"query":"q"})");
  EXPECT_EQ(r.content, "");
}

TEST(ToolCallGrammar, ParametersComeInPropertiesOrderAtMostOnce) {
  auto g = tool_grammar(kTools);
  EXPECT_FALSE(accepts_bytes(g, call("get_weather", {{"days", "3"}, {"city", "Paris"}})));
  EXPECT_FALSE(accepts_bytes(g, call("get_weather", {{"city", "Paris"}, {"city", "Rome"}, {"days", "3"}})));
  EXPECT_FALSE(accepts_bytes(g, call("get_weather", {{"city", "Paris"}, {"days", "3"}, {"country", "FR"}})));
}

TEST(ToolCallGrammar, MixedStringTypesNeverReadBackAsTheWrongType) {
  const char* tools = R"([{"type":"function","function":{"name":"f","parameters":{"type":"object",
    "properties":{"x":{"type":["string","integer"]},"y":{"type":"string","nullable":true}},"required":["x"]}}}])";
  auto g = tool_grammar(tools);
  EXPECT_TRUE(accepts_bytes(g, call("f", {{"x", "abc"}})));
  EXPECT_TRUE(accepts_bytes(g, call("f", {{"x", "42"}})));
  EXPECT_FALSE(accepts_bytes(g, call("f", {{"x", " 42"}})));  // a string the parser would make 42
  EXPECT_TRUE(accepts_bytes(g, call("f", {{"x", "4.5"}})));   // not an integer: the string "4.5"
  EXPECT_TRUE(accepts_bytes(g, call("f", {{"x", "1"}, {"y", "null"}})));
  const ParseResult r = parse_output(tools, call("f", {{"x", "42"}, {"y", "null"}}));
  ASSERT_EQ(r.tool_calls.size(), 1u);
  EXPECT_EQ(parse_json(r.tool_calls[0].arguments), parse_json(R"({"x":42,"y":"null"})"));
}

// Every variant of a valid call that swaps one value for a candidate: what the grammar
// accepts, the parser must read back valid; and both outcomes must occur.
TEST(ToolCallGrammar, EveryAcceptedVariantParsesToValidArguments) {
  auto g = tool_grammar(kTools);
  const std::vector<std::string> values = {"3",
                                           "three",
                                           "3.5",
                                           "-1",
                                           "1e2",
                                           "true",
                                           "false",
                                           "TRUE",
                                           "null",
                                           "NULL",
                                           "",
                                           " 3",
                                           "\"a\"",
                                           "[\"a\",\"b\"]",
                                           "[]",
                                           "{}",
                                           "{\"lang\":\"en\"}",
                                           "celsius",
                                           "a\nb",
                                           "x\r",
                                           "<b>",
                                           "a</parameter>b",
                                           "{\"lang\":\"en\",\"max\":2}",
                                           "0",
                                           "12345678901234"};
  const std::vector<std::pair<std::string, std::vector<std::pair<std::string, std::string>>>> bases = {
      {"get_weather", {{"city", "Paris"}, {"days", "3"}, {"unit", "celsius"}, {"detailed", "true"}}},
      {"search", {{"query", "q"}, {"filters", "{\"lang\":\"en\"}"}, {"tags", "[]"}, {"note", "n"}, {"score", "1"}}},
  };
  size_t accepted = 0, rejected = 0;
  for (const auto& [name, params] : bases)
    for (size_t i = 0; i < params.size(); ++i)
      for (const auto& v : values) {
        auto p = params;
        p[i].second = v;
        const std::string text = call(name, p);
        if (!accepts_bytes(g, text)) {
          ++rejected;
          continue;
        }
        ++accepted;
        expect_round_trip(text);
      }
  EXPECT_GT(accepted, 20u);
  EXPECT_GT(rejected, 20u);
}

TEST(ToolCallGrammar, ErrorsNameWhatCannotBeHonoured) {
  auto keyword = [](const char* tools, std::vector<std::string> names) {
    try {
      ToolCallConstraint c;
      c.names = std::move(names);
      tool_grammar(tools, c);
    } catch (const SchemaError& e) {
      return e.keyword;
    }
    return std::string("(none)");
  };
  EXPECT_EQ(keyword(kTools, {"nope"}), "tool_choice");
  EXPECT_EQ(keyword(R"([{"type":"function","function":{"description":"x"}}])", {}), "tools");
  EXPECT_EQ(keyword(R"({"name":"f"})", {}), "tools");
  EXPECT_EQ(keyword(R"([{"type":"function","function":{"name":"a>b"}}])", {}), "tools");
  EXPECT_EQ(keyword(R"([{"type":"function","function":{"name":"f","parameters":{"type":"object",
      "properties":{"n":{"type":"integer","multipleOf":2}}}}}])",
                    {}),
            "multipleOf");
  EXPECT_EQ(keyword(R"([{"type":"function","function":{"name":"f","parameters":{"anyOf":[{"type":"object"}]}}}])", {}),
            "anyOf");
  EXPECT_EQ(keyword(R"([{"type":"function","function":{"name":"f","parameters":{"type":"object",
      "properties":{"s":{"type":"string","pattern":"(?=a)b"}}}}}])",
                    {}),
            "pattern");
  EXPECT_EQ(keyword(kTools, {"ping"}), "(none)");
}

TEST(ToolCallGrammar, TokenMasksAgreeWithQwenTokenization) {
  auto g = tool_grammar(kTools);
  EXPECT_TRUE(accepts_qwen(g, call("get_weather", {{"city", "Paris"}, {"days", "3"}})));
  EXPECT_TRUE(accepts_qwen(g, call("search", {{"query", "cats"}, {"filters", R"({"lang": "en"})"}})));
  EXPECT_FALSE(accepts_qwen(g, call("get_weather", {{"city", "Paris"}, {"days", "three"}})));
}

}  // namespace
}  // namespace ds::structured::test
