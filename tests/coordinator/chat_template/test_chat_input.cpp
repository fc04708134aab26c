// OpenAI request conversion: validation, content parts, tool-call arguments, thinking control.
#include <gtest/gtest.h>

#include "coordinator/chat_template/chat_input.h"
#include "tests/coordinator/chat_template/test_util.h"

namespace ds {
namespace {

ChatRequestInput convert(const std::string& json) {
  return chat_input_from_request(test::parse_json(json));
}

std::string request_error(const std::string& json) {
  try {
    convert(json);
  } catch (const RequestError& e) {
    return e.what();
  }
  return "<no error>";
}

const jinja::Value& msg_field(const ChatRequestInput& in, size_t i, const char* key) {
  const jinja::Value* v = in.messages.as_list().at(i).as_dict().find(key);
  static const jinja::Value kUndef;
  return v ? *v : kUndef;
}

TEST(ThinkingDirectives, StripAndReport) {
  struct Case {
    std::string in, out;
    std::optional<bool> last;
  };
  const Case cases[] = {
      {"Hello /no_think", "Hello", false},
      {"/no_think Hello", "Hello", false},
      {"/think", "", true},
      {"Hello\n/think\nWorld", "Hello\nWorld", true},
      {"a /think b /no_think", "a b", false},
      {"a /no_think b /think c", "a b c", true},
      {"path/no_think and /thinking and /no_thinker", "path/no_think and /thinking and /no_thinker", std::nullopt},
      {"no directive", "no directive", std::nullopt},
  };
  for (const Case& c : cases) {
    std::string s = c.in;
    EXPECT_EQ(strip_thinking_directives(s), c.last) << c.in;
    EXPECT_EQ(s, c.out) << c.in;
  }
}

TEST(ChatInput, DirectivesResolveThinking) {
  ChatRequestInput in = convert(
      R"({"messages":[{"role":"system","content":"Be brief. /think"},{"role":"user","content":"hi /no_think"}]})");
  EXPECT_EQ(in.enable_thinking, std::optional<bool>(false));
  EXPECT_EQ(msg_field(in, 0, "content").as_text().str(), "Be brief.");
  EXPECT_EQ(msg_field(in, 1, "content").as_text().str(), "hi");
  // Last directive wins, across messages.
  in = convert(
      R"({"messages":[{"role":"user","content":"a /no_think"},{"role":"assistant","content":"b /think"},{"role":"user","content":"/think c"}]})");
  EXPECT_EQ(in.enable_thinking, std::optional<bool>(true));
  EXPECT_EQ(msg_field(in, 1, "content").as_text().str(), "b /think");  // assistant text untouched
  // No directive: template default.
  EXPECT_FALSE(convert(R"({"messages":[{"role":"user","content":"x"}]})").enable_thinking.has_value());
  // Text parts are scanned too.
  in = convert(
      R"({"messages":[{"role":"user","content":[{"type":"text","text":"x "},{"type":"text","text":"/no_think"}]}]})");
  EXPECT_EQ(in.enable_thinking, std::optional<bool>(false));
  EXPECT_EQ(msg_field(in, 0, "content").as_text().str(), "x ");  // the template trims
}

TEST(ChatInput, ExplicitKwargWinsOverDirectives) {
  ChatRequestInput in = convert(
      R"({"messages":[{"role":"user","content":"hi /no_think"}],"chat_template_kwargs":{"enable_thinking":true}})");
  EXPECT_EQ(in.enable_thinking, std::optional<bool>(true));
  EXPECT_EQ(msg_field(in, 0, "content").as_text().str(), "hi");  // still stripped
  in = convert(
      R"({"messages":[{"role":"user","content":"hi /think"}],"extra_body":{"chat_template_kwargs":{"enable_thinking":false}}})");
  EXPECT_EQ(in.enable_thinking, std::optional<bool>(false));
  in = convert(
      R"({"messages":[{"role":"user","content":"hi"}],"extra_body":{"chat_template_kwargs":{"enable_thinking":false}},
                  "chat_template_kwargs":{"enable_thinking":true,"custom":"v"}})");
  EXPECT_EQ(in.enable_thinking, std::optional<bool>(true));
  ASSERT_EQ(in.extra_kwargs.size(), 1u);
  EXPECT_EQ(in.extra_kwargs[0].first, "custom");
}

TEST(ChatInput, RendersNoThinkPromptThroughTemplate) {
  const ChatTemplate t = ChatTemplate::builtin();
  const PromptText p = t.render(convert(R"({"messages":[{"role":"user","content":"Hi /no_think"}]})"));
  EXPECT_EQ(p.text, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
}

TEST(ChatInput, ContentParts) {
  ChatRequestInput in =
      convert(R"({"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}]})");
  EXPECT_TRUE(msg_field(in, 0, "content").is_string());
  EXPECT_EQ(msg_field(in, 0, "content").as_text().str(), "ab");
  in = convert(
      R"({"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"http://x/i.png"}}]}]})");
  EXPECT_TRUE(msg_field(in, 0, "content").is_list());
  ASSERT_EQ(in.image_urls.size(), 1u);
  EXPECT_EQ(in.image_urls[0], "http://x/i.png");
}

TEST(ChatInput, ToolCallArguments) {
  ChatRequestInput in =
      convert(R"({"messages":[{"role":"user","content":"q"},{"role":"assistant","content":null,"tool_calls":[
      {"id":"c1","type":"function","function":{"name":"f","arguments":"{\"a\": 1, \"b\": [2]}"}},
      {"type":"function","function":{"name":"g","arguments":" "}},
      {"type":"function","function":{"name":"h","arguments":{"x":"y"}}}]}]})");
  const jinja::List& calls = msg_field(in, 1, "tool_calls").as_list();
  ASSERT_EQ(calls.size(), 3u);
  auto args = [&](size_t i) { return *calls[i].as_dict().find("function")->as_dict().find("arguments"); };
  EXPECT_TRUE(args(0).is_dict());
  EXPECT_EQ(args(0).as_dict().find("a")->as_int(), 1);
  EXPECT_TRUE(args(1).is_dict());  // an empty string is "no arguments"
  EXPECT_TRUE(args(1).as_dict().entries.empty());
  EXPECT_TRUE(args(2).is_dict());
  EXPECT_TRUE(msg_field(in, 1, "content").is_none());
  const PromptText p = ChatTemplate::builtin().render(in);
  EXPECT_NE(p.text.find("<function=f>\n<parameter=a>\n1\n</parameter>\n<parameter=b>\n[2]\n</parameter>\n</function>"),
            std::string::npos);
}

// Arguments that are not an object are the request's fault and are named as such, never
// passed on to fail inside the template with its internals in the message.
TEST(ChatInput, ToolCallArgumentsThatAreNotAnObjectAreRefused) {
  const std::string head = R"({"messages":[{"role":"user","content":"q"},{"role":"assistant","tool_calls":[)";
  EXPECT_EQ(request_error(head + R"({"function":{"name":"g","arguments":"not json"}}]}]})"),
            "messages[1].tool_calls[0].function.arguments must be a JSON object or a string holding one (the "
            "string is not JSON)");
  EXPECT_EQ(request_error(head + R"({"function":{"name":"g","arguments":"[1, 2]"}}]}]})"),
            "messages[1].tool_calls[0].function.arguments must be a JSON object or a string holding one (it holds "
            "another JSON value)");
  EXPECT_EQ(request_error(head + R"({"function":{"name":"g","arguments":7}}]}]})"),
            "messages[1].tool_calls[0].function.arguments must be a JSON object or a string");
}

TEST(ChatInput, MiscFields) {
  ChatRequestInput in = convert(R"({"messages":[{"role":"developer","content":"s"},{"role":"user","content":"u"},
      {"role":"assistant","content":"a","reasoning":"r"}],"add_generation_prompt":false,"tools":null})");
  EXPECT_EQ(msg_field(in, 0, "role").as_text().str(), "system");
  EXPECT_FALSE(msg_field(in, 0, "role").as_text().any_untrusted());
  EXPECT_EQ(msg_field(in, 2, "reasoning_content").as_text().str(), "r");
  EXPECT_FALSE(in.add_generation_prompt);
  EXPECT_FALSE(in.tools.has_value());
}

TEST(ChatInput, ValidationErrors) {
  EXPECT_EQ(request_error("[]"), "request body must be a JSON object");
  EXPECT_EQ(request_error(R"({"messages":[]})"), "'messages' must be a non-empty array");
  EXPECT_EQ(request_error(R"({"messages":[{"content":"x"}]})"), "messages[0].role is required and must be a string");
  EXPECT_EQ(request_error(R"({"messages":[{"role":"robot","content":"x"}]})"),
            "messages[0].role must be one of 'system', 'developer', 'user', 'assistant', 'tool'");
  EXPECT_EQ(request_error(R"({"messages":[{"role":"user"}]})"), "messages[0].content is required for role 'user'");
  EXPECT_EQ(request_error(R"({"messages":[{"role":"user","content":5}]})"),
            "messages[0].content must be a string, an array of content parts, or null");
  EXPECT_EQ(request_error(R"({"messages":[{"role":"user","content":[{"type":"input_audio"}]}]})"),
            "messages[0].content[0].type 'input_audio' is not supported (expected 'text' or 'image_url')");
  EXPECT_EQ(request_error(R"({"messages":[{"role":"user","content":[{"type":"text"}]}]})"),
            "messages[0].content[0].text must be a string");
  EXPECT_EQ(request_error(R"({"messages":[{"role":"assistant","content":"","tool_calls":[{"function":{}}]}]})"),
            "messages[0].tool_calls[0].function.name must be a string");
  EXPECT_EQ(request_error(R"({"messages":[{"role":"user","content":"x"}],"tools":{}})"), "'tools' must be an array");
  EXPECT_EQ(request_error(R"({"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function"}]})"),
            "tools[0].function must be an object");
  EXPECT_EQ(
      request_error(R"({"messages":[{"role":"user","content":"x"}],"chat_template_kwargs":{"enable_thinking":"yes"}})"),
      "chat_template_kwargs.enable_thinking must be a boolean");
  EXPECT_EQ(request_error(R"({"messages":[{"role":"user","content":"x"}],"chat_template_kwargs":{"messages":[]}})"),
            "chat_template_kwargs.messages is reserved");
  const std::string deep = std::string(300, '[') + std::string(300, ']');
  EXPECT_EQ(request_error(R"({"messages":[{"role":"user","content":"x","meta":)" + deep + "}]}"),
            "request: JSON nested too deeply");
}

TEST(ChatInput, TemplateRaiseForBadConversation) {
  const ChatTemplate t = ChatTemplate::builtin();
  EXPECT_THROW(t.render(convert(R"({"messages":[{"role":"assistant","content":"x"}]})")), TemplateRaise);
  EXPECT_THROW(t.render(convert(R"({"messages":[{"role":"user","content":"x"},{"role":"system","content":"s"}]})")),
               TemplateRaise);
}

}  // namespace
}  // namespace ds
