// Unit tests of the Jinja subset: syntax, scoping, filters, tests, methods, errors, limits.
#include <gtest/gtest.h>

#include "coordinator/chat_template/chat_template.h"
#include "tests/coordinator/chat_template/test_util.h"

namespace ds {
namespace {

using test::render;

std::string error_of(const std::string& src, const std::string& ctx = "{}") {
  try {
    render(src, ctx);
  } catch (const TemplateError& e) {
    return e.what();
  }
  return "<no error>";
}

TEST(JinjaBasics, TextAndOutput) {
  EXPECT_EQ(render("Hello {{ name }}!", R"({"name":"Bob"})"), "Hello Bob!");
  EXPECT_EQ(render("{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }}"),
            "7 9 3 -4 1 2");
  EXPECT_EQ(render("{{ 7 / 2 }} {{ 4 / 2 }} {{ 2 ** 10 }} {{ 1.5 + 1 }} {{ 1e20 }} {{ 0.0001 }} {{ 1e-05 }}"),
            "3.5 2.0 1024 2.5 1e+20 0.0001 1e-05");
  EXPECT_EQ(render("{{ 'a' ~ 1 ~ none ~ true }}|{{ 'x' + 'y' }}|{{ 'ab' * 3 }}"), "a1NoneTrue|xy|ababab");
  EXPECT_EQ(render("{{ [1, 'a', none, [true]] }} {{ {'k': 'v', 'n': 1} }}"),
            "[1, 'a', None, [True]] {'k': 'v', 'n': 1}");
  EXPECT_EQ(render("{{ \"it's\" }} {{ 'say \"hi\"' }} {{ 'a\\tb\\n' }}"), "it's say \"hi\" a\tb\n");
  EXPECT_EQ(render("{{ '\\u00e9\\x41' }}"),
            "\xC3\xA9"
            "A");
  EXPECT_EQ(render("{{ 'con' 'cat' }}"), "concat");
}

TEST(JinjaBasics, ComparisonsAndLogic) {
  EXPECT_EQ(render("{{ 1 < 2 < 3 }} {{ 1 < 3 < 2 }} {{ 'a' < 'b' }} {{ 1 == 1.0 }} {{ [1,2] == [1,2] }}"),
            "True False True True True");
  EXPECT_EQ(render("{{ 'b' in 'abc' }} {{ 2 in [1,2] }} {{ 'k' in {'k':1} }} {{ 'z' not in 'abc' }}"),
            "True True True True");
  EXPECT_EQ(render("{{ 0 or 'x' }} {{ 1 and 'y' }} {{ '' and 'z' }}| {{ not [] }} {{ not {} }} {{ not '' }}"),
            "x y | True True True");
  EXPECT_EQ(
      render("{{ 'yes' if x else 'no' }} {{ 'yes' if y else 'no' }} [{{ 'only' if false }}]", R"({"x":1,"y":[]})"),
      "yes no []");
}

TEST(JinjaBasics, WhitespaceControl) {
  EXPECT_EQ(render("a  {{- 'b' -}}  c"), "abc");
  EXPECT_EQ(render("a\n  {%- if true -%}\n  b\n  {%- endif -%}\n  c"), "abc");
  // trim_blocks + lstrip_blocks (the reference environment's settings).
  EXPECT_EQ(render("x\n  {% if true %}\n  y\n  {% endif %}\nz"), "x\n  y\nz");
  EXPECT_EQ(render("{% if true %}  a{% endif %}"), "  a");
  EXPECT_EQ(render("a {{ 'b' }}\nc"), "a b\nc");  // no trimming after }}
  EXPECT_EQ(render("a\n  {%+ if true %}b{% endif %}"), "a\n  b");
  EXPECT_EQ(render("a{# comment #}b {#- c -#} c\n"), "abc");  // one trailing newline dropped
  EXPECT_EQ(render("a\r\nb"), "a\nb");
}

TEST(JinjaStatements, IfElifElse) {
  const std::string t = "{% if n == 1 %}one{% elif n == 2 %}two{% else %}many{% endif %}";
  EXPECT_EQ(render(t, R"({"n":1})"), "one");
  EXPECT_EQ(render(t, R"({"n":2})"), "two");
  EXPECT_EQ(render(t, R"({"n":5})"), "many");
}

TEST(JinjaStatements, ForLoopVariables) {
  EXPECT_EQ(render("{% for x in xs %}{{ loop.index0 }}{{ loop.index }}{{ loop.first }}{{ loop.last }}{{ loop.length "
                   "}};{% endfor %}",
                   R"({"xs":["a","b"]})"),
            "01TrueFalse2;12FalseTrue2;");
  EXPECT_EQ(render("{% for x in xs %}[{{ loop.previtem }}|{{ loop.nextitem }}|{{ loop.revindex }}]{% endfor %}",
                   R"({"xs":[1,2,3]})"),
            "[|2|3][1|3|2][2||1]");
  EXPECT_EQ(
      render("{% for x in xs if x > 1 %}{{ x }}{{ loop.index }}{{ loop.length }},{% endfor %}", R"({"xs":[1,2,3]})"),
      "212,322,");
  EXPECT_EQ(render("{% for x in [] %}x{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(render("{% for k, v in d|items %}{{ k }}={{ v }};{% endfor %}", R"({"d":{"b":1,"a":2}})"), "b=1;a=2;");
  EXPECT_EQ(render("{% for k in d %}{{ k }}{% endfor %}", R"({"d":{"b":1,"a":2}})"), "ba");
  EXPECT_EQ(render("{% for c in 'h\xC3\xA9' %}[{{ c }}]{% endfor %}"), "[h][\xC3\xA9]");
  EXPECT_EQ(render("{% for x in undefined_thing %}x{% endfor %}ok"), "ok");
  EXPECT_EQ(render("{% for x in [1,2,3,4] %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 4 %}{% break %}{% endif "
                   "%}{{ x }}{% endfor %}"),
            "13");
  EXPECT_EQ(render("{% for x in [1,2,3] %}{{ loop.cycle('a', 'b') }}{% endfor %}"), "aba");
}

TEST(JinjaStatements, NestedLoopsShadowLoop) {
  EXPECT_EQ(
      render("{% for a in [1,2] %}{% for b in [1,2,3] %}{{ loop.length }}{% endfor %}{{ loop.length }}{% endfor %}"),
      "33323332");
}

TEST(JinjaStatements, SetScoping) {
  // `set` inside a loop does not leak; namespaces carry state out.
  EXPECT_EQ(render("{% set x = 1 %}{% for i in [1,2] %}{% set x = 5 %}{% endfor %}{{ x }}"), "1");
  EXPECT_EQ(render("{% set ns = namespace(x=1, y='a') %}{% for i in [1,2,3] %}{% set ns.x = ns.x + i %}{% endfor %}{{ "
                   "ns.x }}{{ ns.y }}"),
            "7a");
  EXPECT_EQ(render("{% if true %}{% set x = 'in-if' %}{% endif %}{{ x }}"), "in-if");
  EXPECT_EQ(render("{% set x %}a{{ 1 + 1 }}b{% endset %}[{{ x }}]"), "[a2b]");
  EXPECT_EQ(render("{% set t = 1, 2 %}{{ t }}"), "[1, 2]");
  EXPECT_NE(error_of("{% set x = 1 %}{% set x.y = 2 %}").find("non-namespace"), std::string::npos);
}

TEST(JinjaStatements, Macros) {
  const std::string m =
      "{% macro greet(name, punct='!', upper=false) %}{{ (name|upper) if upper else name }}{{ punct }}{% endmacro %}";
  EXPECT_EQ(render(m + "{{ greet('bob') }} {{ greet('amy', '?') }} {{ greet('x', upper=true) }}"), "bob! amy? X!");
  // Macros see globals (and namespaces defined before them), not the caller's locals.
  EXPECT_EQ(render("{% set ns = namespace(n=0) %}{% macro bump() %}{% set ns.n = ns.n + 1 %}{{ ns.n }}{% endmacro %}"
                   "{{ bump() }}{{ bump() }}{{ ns.n }}"),
            "122");
  EXPECT_EQ(render("{% macro f() %}[{{ loc }}]{% endmacro %}{% for loc in [1] %}{{ f() }}{% endfor %}"), "[]");
  EXPECT_EQ(render("{% macro f(a) %} x {% endmacro %}[{{ f(1)|trim }}]"), "[x]");
  EXPECT_NE(error_of("{% macro f(a) %}{% endmacro %}{{ f(1, 2) }}").find("takes 1 arguments"), std::string::npos);
  EXPECT_NE(error_of("{% macro f(a) %}{% endmacro %}{{ f(b=1) }}").find("unexpected keyword"), std::string::npos);
}

TEST(JinjaStatements, GenerationBlockIsTransparent) {
  EXPECT_EQ(render("a{% generation %}b{% endgeneration %}c"), "abc");
}

TEST(JinjaExpressions, IndexingAndSlicing) {
  const std::string ctx = R"({"l":[1,2,3,4],"s":"h\u00e9llo","d":{"a":{"b":"deep"}}})";
  EXPECT_EQ(render("{{ l[0] }}{{ l[-1] }}[{{ l[9] }}]{{ l[1:3] }}{{ l[::-1] }}{{ l[::2] }}{{ l[-2:] }}", ctx),
            "14[][2, 3][4, 3, 2, 1][1, 3][3, 4]");
  EXPECT_EQ(render("{{ s[1] }}|{{ s[::-1] }}|{{ s[1:3] }}|{{ s[:-1] }}", ctx),
            "\xC3\xA9|oll\xC3\xA9h|\xC3\xA9l|h\xC3\xA9ll");
  EXPECT_EQ(render("{{ d.a.b }} {{ d['a']['b'] }} [{{ d.x.y.z }}] {{ l.0 }}", ctx), "deep deep [] 1");
}

TEST(JinjaExpressions, UndefinedBehaviour) {
  EXPECT_EQ(render("[{{ nope }}][{{ nope.attr }}][{{ d.missing }}]", R"({"d":{}})"), "[][][]");
  EXPECT_EQ(render("{{ nope is defined }} {{ nope is undefined }} {{ d.x is defined }} {{ not nope }}", R"({"d":{}})"),
            "False True False True");
  EXPECT_EQ(render("{{ nope | default('dflt') }} {{ '' | default('e', true) }} {{ 'v' | default('x') }}"), "dflt e v");
  EXPECT_EQ(render("{{ nope ~ 'x' }}"), "x");
  EXPECT_NE(error_of("{{ nope + 1 }}").find("unsupported operand"), std::string::npos);
  EXPECT_NE(error_of("{{ nope() }}").find("'nope' is undefined"), std::string::npos);
}

TEST(JinjaFilters, StringFilters) {
  EXPECT_EQ(render("[{{ '  a b \\n' | trim }}][{{ 'xxaxx' | trim('x') }}]"), "[a b][a]");
  EXPECT_EQ(render("[{{ '\xE3\x80\x80"
                   "a\xE3\x80\x80' | trim }}]"),
            "[a]");  // U+3000 is whitespace
  EXPECT_EQ(render("{{ 'Ab' | upper }}{{ 'Ab' | lower }} {{ 'hello world' | title }} {{ 'hELLO' | capitalize }}"),
            "ABab Hello World Hello");
  EXPECT_EQ(render("{{ 'aaa' | replace('a', 'b') }} {{ 'aaa' | replace('a', 'b', 2) }}"), "bbb bba");
  EXPECT_EQ(render("{{ 3 | string }}{{ none | string }}{{ 'x' | safe }}"), "3Nonex");
  EXPECT_EQ(render("{{ 'héllo' | length }} {{ [1,2] | length }} {{ {'a':1} | length }} {{ [1,2] | count }}"),
            "5 2 1 2");
}

TEST(JinjaFilters, SequenceFilters) {
  EXPECT_EQ(render("{{ [1,2,3] | join(', ') }} {{ ['a','b'] | join }} {{ [1,2] | first }} {{ [1,2] | last }} {{ 'ab' | "
                   "first }}"),
            "1, 2, 3 ab 1 2 a");
  EXPECT_EQ(render("{{ {'a':1,'b':2} | items | list }} {{ 'ab' | list }} {{ [1,2] | reverse | list }}"),
            "[['a', 1], ['b', 2]] ['a', 'b'] [2, 1]");
  EXPECT_EQ(render("{{ ms | selectattr('role', 'equalto', 'user') | map(attribute='c') | join(',') }}",
                   R"({"ms":[{"role":"user","c":"1"},{"role":"x","c":"2"},{"role":"user","c":"3"}]})"),
            "1,3");
  EXPECT_EQ(render("{{ [1,2,3,4] | select('even') | list }} {{ [1,2,3] | reject('odd') | list }} {{ ['1','2'] | "
                   "map('int') | list }}"),
            "[2, 4] [2] [1, 2]");
  EXPECT_EQ(render("{{ '42' | int + 1 }} {{ 'x' | int }} {{ '1.5' | float }} {{ -3 | abs }}"), "43 0 1.5 3");
}

TEST(JinjaFilters, ToJson) {
  const std::string ctx =
      R"({"v":{"name":"f","desc":"caf\u00e9 \u6771\u4eac \ud83e\udd99","n":[1,2.5,true,null],"q":"a\"b\\c\nd\u0001","e":{},"l":[]}})";
  EXPECT_EQ(render("{{ v | tojson }}", ctx),
            "{\"name\": \"f\", \"desc\": \"café 東京 🦙\", \"n\": [1, 2.5, true, null], \"q\": "
            "\"a\\\"b\\\\c\\nd\\u0001\", "
            "\"e\": {}, \"l\": []}");
  EXPECT_EQ(render("{{ {'a': [1, {'b': 2}]} | tojson(indent=2) }}"),
            "{\n  \"a\": [\n    1,\n    {\n      \"b\": 2\n    }\n  ]\n}");
  EXPECT_EQ(render("{{ {'b': 1, 'a': 'é'} | tojson(sort_keys=true, ensure_ascii=true) }}"),
            "{\"a\": \"\\u00e9\", \"b\": 1}");
  EXPECT_EQ(render("{{ {'a': 1, 'b': 2} | tojson(separators=(',', ':')) }}"), "{\"a\":1,\"b\":2}");
  EXPECT_EQ(render("{{ 1.0 | tojson }} {{ 'x' | tojson }} {{ 100000000000000000000.0 | tojson }}"), "1.0 \"x\" 1e+20");
}

TEST(JinjaTests, TypeTests) {
  const std::string ctx = R"({"s":"x","l":[1],"d":{"a":1},"n":null,"i":3,"f":1.5,"b":true})";
  EXPECT_EQ(
      render("{{ s is string }}{{ l is string }}{{ d is mapping }}{{ l is mapping }}{{ n is none }}{{ s is none }}",
             ctx),
      "TrueFalseTrueFalseTrueFalse");
  EXPECT_EQ(render("{{ l is iterable }}{{ s is iterable }}{{ i is iterable }}{{ l is sequence }}{{ d is sequence }}{{ "
                   "i is sequence }}",
                   ctx),
            "TrueTrueFalseTrueTrueFalse");
  EXPECT_EQ(render("{{ i is number }}{{ f is number }}{{ s is number }}{{ b is boolean }}{{ i is boolean }}", ctx),
            "TrueTrueFalseTrueFalse");
  EXPECT_EQ(render("{{ b is true }}{{ b is false }}{{ s is not string }}{{ d is not mapping }}{{ i is integer }}{{ f "
                   "is float }}",
                   ctx),
            "TrueFalseFalseFalseTrueTrue");
  EXPECT_EQ(
      render("{{ i is odd }}{{ i is divisibleby 3 }}{{ i is eq 3 }}{{ s is in ['x'] }}{{ s is sameas 'x' }}", ctx),
      "TrueTrueTrueTrueTrue");
}

TEST(JinjaMethods, StringAndDictMethods) {
  EXPECT_EQ(render("{{ 'abc'.startswith('ab') }}{{ 'abc'.endswith('bc') }}{{ 'abc'.startswith(('x', 'a')) }}"),
            "TrueTrueTrue");
  EXPECT_EQ(render("{{ 'a,b,,c'.split(',') }} {{ '  a  b '.split() }} {{ 'a b c'.split(' ', 1) }}"),
            "['a', 'b', '', 'c'] ['a', 'b'] ['a', 'b c']");
  EXPECT_EQ(render("[{{ '\\n x \\n'.strip() }}][{{ '\\n x \\n'.lstrip() }}][{{ '\\n x \\n'.rstrip('\\n') }}][{{ "
                   "'xyx'.strip('x') }}]"),
            "[x][x \n][\n x ][y]");
  EXPECT_EQ(render("{{ 'aXa'.replace('a', 'b') }} {{ 'Ab'.upper() }}{{ 'Ab'.lower() }} {{ 'abcb'.find('b') }} {{ "
                   "'abcb'.count('b') }}"),
            "bXb ABab 1 2");
  EXPECT_EQ(render("{{ '-'.join(['a', 'b']) }}"), "a-b");
  const std::string ctx = R"({"d":{"a":1,"b":2}})";
  EXPECT_EQ(
      render("{{ d.get('a') }} {{ d.get('z') }} {{ d.get('z', 9) }} {{ d.keys() }} {{ d.values() }} {{ d.items() }}",
             ctx),
      "1 None 9 ['a', 'b'] [1, 2] [['a', 1], ['b', 2]]");
  // The Qwen3.5 reasoning split.
  EXPECT_EQ(render("{{ c.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') }}|{{ "
                   "c.split('</think>')[-1].lstrip('\\n') }}",
                   R"({"c":"<think>\nWhy.\n</think>\n\nAnswer"})"),
            "Why.|Answer");
}

TEST(JinjaGlobals, RangeDictNamespace) {
  EXPECT_EQ(render("{{ range(3) | list }} {{ range(1, 7, 2) | list }} {{ range(3, 0, -1) | list }}"),
            "[0, 1, 2] [1, 3, 5] [3, 2, 1]");
  EXPECT_EQ(render("{{ dict(a=1, b='x') }}"), "{'a': 1, 'b': 'x'}");
}

TEST(JinjaErrors, RaiseException) {
  try {
    render("{% if true %}{{ raise_exception('Bad ' ~ 'input.') }}{% endif %}");
    FAIL() << "expected TemplateRaise";
  } catch (const TemplateRaise& e) {
    EXPECT_STREQ(e.what(), "Bad input.");
  }
}

TEST(JinjaErrors, ParseErrorsHaveLineAndColumn) {
  EXPECT_EQ(error_of("ok\n{% frobnicate %}"), "chat template 2:4: unknown or unsupported tag 'frobnicate'");
  EXPECT_EQ(error_of("{{ x | nosuchfilter }}"), "chat template 1:8: unknown filter 'nosuchfilter'");
  EXPECT_EQ(error_of("{{ x is nosuchtest }}"), "chat template 1:9: unknown test 'nosuchtest'");
  EXPECT_EQ(error_of("{% if x %}never closed"), "chat template 1:23: unexpected end of template, expected 'elif'");
  EXPECT_EQ(error_of("\n  {{ 'unterminated }}"), "chat template 2:6: unterminated string literal");
  EXPECT_EQ(error_of("{{ 1 + }}"), "chat template 1:8: unexpected '}}'");
  EXPECT_EQ(error_of("{% break %}"), "chat template 1:4: 'break' outside of a loop");
  EXPECT_EQ(error_of("{{ x @ y }}"), "chat template 1:6: unexpected character '@'");
  EXPECT_EQ(error_of("{# open"), "chat template 1:1: unterminated comment");
}

TEST(JinjaErrors, RuntimeErrorsHavePosition) {
  EXPECT_EQ(error_of("\n{{ 'a' + 1 }}"), "chat template 2:8: unsupported operand types for +: 'string' and 'int'");
  EXPECT_EQ(error_of("{{ 5 | items }}"), "chat template 1:6: items: can only get item pairs from a mapping, got int");
  EXPECT_EQ(error_of("{% for x in 5 %}{% endfor %}"), "chat template 1:4: 'int' object is not iterable");
}

TEST(JinjaLimits, RunawayTemplatesAreStopped) {
  jinja::Limits lim;
  lim.max_loop_iterations = 1000;
  lim.max_output_bytes = 1 << 16;
  ChatRequestInput in;
  auto err = [&](const std::string& src) {
    try {
      ChatTemplate::from_source(src, lim).render(in);
    } catch (const TemplateError& e) {
      return std::string(e.what());
    }
    return std::string("<no error>");
  };
  EXPECT_NE(err("{% for i in range(100) %}{% for j in range(100) %}{% endfor %}{% endfor %}").find("iteration limit"),
            std::string::npos);
  EXPECT_NE(err("{{ range(100000) }}").find("range() too large"), std::string::npos);
  EXPECT_NE(err("{% for i in range(500) %}{{ 'x' * 1000 }}{% endfor %}").find("output exceeds"), std::string::npos);
  EXPECT_NE(err("{{ 'x' * 100000000 }}").find("too large"), std::string::npos);
  EXPECT_NE(err("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}").find("call depth"), std::string::npos);
  EXPECT_NE(err(std::string(500, '(') + "1" + std::string(500, ')')).find("<no error>"),
            std::string::npos);  // plain text
  EXPECT_THROW(ChatTemplate::from_source("{{ " + std::string(500, '(') + "1" + std::string(500, ')') + " }}"),
               TemplateError);
  EXPECT_NE(err("{{ 9223372036854775807 + 1 }}").find("overflow"), std::string::npos);
  // Values nested by a loop: printing/comparing them is bounded, not a stack overflow.
  EXPECT_NE(err("{% set ns = namespace(l=[]) %}{% for i in range(900) %}{% set ns.l = [ns.l] %}{% endfor %}{{ ns.l }}")
                .find("nested too deeply"),
            std::string::npos);
}

}  // namespace
}  // namespace ds
