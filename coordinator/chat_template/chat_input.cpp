#include "coordinator/chat_template/chat_input.h"

#include <algorithm>

#include "coordinator/chat_template/json.h"

namespace ds {
namespace {

using jinja::Dict;
using jinja::Text;
using jinja::Value;

[[noreturn]] void bad(const std::string& msg) {
  throw RequestError(msg);
}

const rapidjson::Value* member(const rapidjson::Value& obj, const char* name) {
  auto it = obj.FindMember(name);
  return it == obj.MemberEnd() || it->value.IsNull() ? nullptr : &it->value;
}

std::string str_of(const rapidjson::Value& v) {
  return std::string(v.GetString(), v.GetStringLength());
}

struct Conversion {
  std::optional<bool> directive;  // last /think or /no_think seen
  std::vector<std::string> image_urls;

  std::string take_text(std::string text, bool directives) {
    if (directives) {
      if (auto d = strip_thinking_directives(text)) directive = d;
    }
    return text;
  }

  // Returns the template value for `content` (string, none, or list of parts).
  Value content(const rapidjson::Value* c, const std::string& path, bool directives) {
    if (c == nullptr) return Value::none();
    if (c->IsString()) return Value::untrusted(take_text(str_of(*c), directives));
    if (!c->IsArray()) bad(path + " must be a string, an array of content parts, or null");
    std::string joined;
    jinja::List parts;
    bool has_media = false;
    for (rapidjson::SizeType i = 0; i < c->Size(); ++i) {
      const std::string p = path + "[" + std::to_string(i) + "]";
      const rapidjson::Value& part = (*c)[i];
      const rapidjson::Value* type = part.IsObject() ? member(part, "type") : nullptr;
      if (type == nullptr || !type->IsString()) bad(p + " must be an object with a string 'type'");
      const std::string t = str_of(*type);
      Value d = Value::dict();
      d.as_dict().set(Text::trusted("type"), Value::trusted(t == "text" ? "text" : "image_url"));
      if (t == "text") {
        const rapidjson::Value* text = member(part, "text");
        if (text == nullptr || !text->IsString()) bad(p + ".text must be a string");
        std::string s = take_text(str_of(*text), directives);
        joined += s;
        d.as_dict().set(Text::trusted("text"), Value::untrusted(std::move(s)));
      } else if (t == "image_url") {
        const rapidjson::Value* img = member(part, "image_url");
        const rapidjson::Value* url = img == nullptr ? nullptr : (img->IsObject() ? member(*img, "url") : img);
        if (url == nullptr || !url->IsString()) bad(p + ".image_url.url must be a string");
        image_urls.push_back(str_of(*url));
        Value u = Value::dict();
        u.as_dict().set(Text::trusted("url"), Value::untrusted(str_of(*url)));
        d.as_dict().set(Text::trusted("image_url"), u);
        has_media = true;
      } else {
        bad(p + ".type '" + t + "' is not supported (expected 'text' or 'image_url')");
      }
      parts.push_back(std::move(d));
    }
    // Text-only parts are just a string to every template; keep parts only for media.
    if (!has_media) return Value::untrusted(std::move(joined));
    return Value::list(std::move(parts));
  }

  Value tool_call(const rapidjson::Value& call, const std::string& path) {
    if (!call.IsObject()) bad(path + " must be an object");
    Value out = jinja::value_from_json(call);
    const rapidjson::Value* fn = member(call, "function");
    if (fn == nullptr || !fn->IsObject()) bad(path + ".function must be an object");
    const rapidjson::Value* name = member(*fn, "name");
    if (name == nullptr || !name->IsString()) bad(path + ".function.name must be a string");
    Value f = jinja::value_from_json(*fn);
    if (const rapidjson::Value* args = member(*fn, "arguments"); args != nullptr && args->IsString()) {
      // Templates render arguments key by key, so they must be an object; the string form is
      // the OpenAI one. An empty string (some clients' "no arguments") is {}.
      const std::string text = str_of(*args);
      rapidjson::Document parsed;
      if (text.find_first_not_of(" \t\r\n") == std::string::npos) {
        parsed.SetObject();
      } else {
        parsed.Parse<rapidjson::kParseFullPrecisionFlag>(text.data(), text.size());
      }
      if (parsed.HasParseError() || !parsed.IsObject()) {
        bad(path + ".function.arguments must be a JSON object or a string holding one (" +
            (parsed.HasParseError() ? std::string("the string is not JSON")
                                    : std::string("it holds another JSON value")) +
            ")");
      }
      f.as_dict().set(Text::trusted("arguments"), jinja::value_from_json(parsed));
    } else if (args != nullptr && !args->IsObject()) {
      bad(path + ".function.arguments must be a JSON object or a string");
    }
    out.as_dict().set(Text::trusted("function"), std::move(f));
    return out;
  }

  Value message(const rapidjson::Value& m, const std::string& path) {
    if (!m.IsObject()) bad(path + " must be an object");
    const rapidjson::Value* role_v = member(m, "role");
    if (role_v == nullptr || !role_v->IsString()) bad(path + ".role is required and must be a string");
    std::string role = str_of(*role_v);
    if (role == "developer") role = "system";
    if (role != "system" && role != "user" && role != "assistant" && role != "tool") {
      bad(path + ".role must be one of 'system', 'developer', 'user', 'assistant', 'tool'");
    }
    Value out = jinja::value_from_json(m);
    Dict& d = out.as_dict();
    // The role passed the whitelist above, so it is our literal, not client bytes.
    d.set(Text::trusted("role"), Value::trusted(role));
    const rapidjson::Value* c = member(m, "content");
    if (c == nullptr && role != "assistant") bad(path + ".content is required for role '" + role + "'");
    d.set(Text::trusted("content"), content(c, path + ".content", role == "system" || role == "user"));
    if (role == "assistant") assistant_fields(m, path, d);
    return out;
  }

  void assistant_fields(const rapidjson::Value& m, const std::string& path, Dict& d) {
    const rapidjson::Value* r = member(m, "reasoning_content");
    if (r == nullptr) r = member(m, "reasoning");
    if (r != nullptr) {
      if (!r->IsString()) bad(path + ".reasoning_content must be a string");
      d.set(Text::trusted("reasoning_content"), Value::untrusted(str_of(*r)));
    }
    const rapidjson::Value* calls = member(m, "tool_calls");
    if (calls == nullptr) return;
    if (!calls->IsArray()) bad(path + ".tool_calls must be an array");
    jinja::List out;
    for (rapidjson::SizeType i = 0; i < calls->Size(); ++i) {
      out.push_back(tool_call((*calls)[i], path + ".tool_calls[" + std::to_string(i) + "]"));
    }
    d.set(Text::trusted("tool_calls"), Value::list(std::move(out)));
  }
};

Value convert_tools(const rapidjson::Value& tools) {
  if (!tools.IsArray()) bad("'tools' must be an array");
  for (rapidjson::SizeType i = 0; i < tools.Size(); ++i) {
    const std::string p = "tools[" + std::to_string(i) + "]";
    const rapidjson::Value& t = tools[i];
    if (!t.IsObject()) bad(p + " must be an object");
    const rapidjson::Value* fn = member(t, "function");
    if (fn == nullptr || !fn->IsObject()) bad(p + ".function must be an object");
    const rapidjson::Value* name = member(*fn, "name");
    if (name == nullptr || !name->IsString() || name->GetStringLength() == 0)
      bad(p + ".function.name must be a non-empty string");
  }
  return jinja::value_from_json(tools);
}

// Top-level chat_template_kwargs override those inside extra_body.
void apply_kwargs(const rapidjson::Value* kwargs, const char* where, ChatRequestInput& in,
                  std::optional<bool>& explicit_thinking) {
  if (kwargs == nullptr) return;
  if (!kwargs->IsObject()) bad(std::string(where) + " must be an object");
  for (const auto& m : kwargs->GetObject()) {
    const std::string name = str_of(m.name);
    if (name == "enable_thinking") {
      if (m.value.IsNull()) continue;
      if (!m.value.IsBool()) bad(std::string(where) + ".enable_thinking must be a boolean");
      explicit_thinking = m.value.GetBool();
    } else if (name == "add_generation_prompt") {
      if (!m.value.IsBool()) bad(std::string(where) + ".add_generation_prompt must be a boolean");
      in.add_generation_prompt = m.value.GetBool();
    } else if (name == "messages" || name == "tools" || name == "documents" || name == "raise_exception") {
      bad(std::string(where) + "." + name + " is reserved");
    } else {
      auto it = std::find_if(in.extra_kwargs.begin(), in.extra_kwargs.end(),
                             [&](const auto& kv) { return kv.first == name; });
      if (it != in.extra_kwargs.end()) {
        it->second = jinja::value_from_json(m.value);
      } else {
        in.extra_kwargs.emplace_back(name, jinja::value_from_json(m.value));
      }
    }
  }
}

ChatRequestInput convert_request(const rapidjson::Value& request);

}  // namespace

ChatRequestInput chat_input_from_request(const rapidjson::Value& request) {
  try {
    return convert_request(request);
  } catch (const jinja::EvalError& e) {  // only from value_from_json: nesting too deep
    bad(std::string("request: ") + e.what());
  }
}

namespace {

ChatRequestInput convert_request(const rapidjson::Value& request) {
  if (!request.IsObject()) bad("request body must be a JSON object");
  const rapidjson::Value* msgs = member(request, "messages");
  if (msgs == nullptr || !msgs->IsArray() || msgs->Empty()) bad("'messages' must be a non-empty array");

  ChatRequestInput in;
  Conversion conv;
  jinja::List list;
  for (rapidjson::SizeType i = 0; i < msgs->Size(); ++i) {
    list.push_back(conv.message((*msgs)[i], "messages[" + std::to_string(i) + "]"));
  }
  in.messages = Value::list(std::move(list));
  in.image_urls = std::move(conv.image_urls);
  if (const rapidjson::Value* tools = member(request, "tools")) in.tools = convert_tools(*tools);
  if (const rapidjson::Value* agp = member(request, "add_generation_prompt")) {
    if (!agp->IsBool()) bad("'add_generation_prompt' must be a boolean");
    in.add_generation_prompt = agp->GetBool();
  }
  std::optional<bool> explicit_thinking;
  if (const rapidjson::Value* extra = member(request, "extra_body")) {
    if (!extra->IsObject()) bad("'extra_body' must be an object");
    apply_kwargs(member(*extra, "chat_template_kwargs"), "extra_body.chat_template_kwargs", in, explicit_thinking);
  }
  apply_kwargs(member(request, "chat_template_kwargs"), "chat_template_kwargs", in, explicit_thinking);
  in.enable_thinking = explicit_thinking ? explicit_thinking : conv.directive;
  return in;
}

}  // namespace
}  // namespace ds
