// The non-generation routes of OpenAIService: models, readiness, metrics, tokenizer access.
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include "coordinator/http/api_error.h"
#include "coordinator/openai/json_fields.h"
#include "coordinator/openai/response_json.h"
#include "coordinator/openai/service.h"

namespace ds::openai {

namespace {

using Writer = rapidjson::Writer<rapidjson::StringBuffer>;

void key_str(Writer& w, const char* key, std::string_view s) {
  w.Key(key);
  w.String(s.data(), static_cast<rapidjson::SizeType>(s.size()));
}

HttpResponse json_reply(const rapidjson::StringBuffer& sb, int status = 200) {
  return HttpResponse{status, "application/json", std::string(sb.GetString(), sb.GetSize()), {}};
}

}  // namespace

void OpenAIService::list_models(Channel channel) {
  rapidjson::StringBuffer sb;
  Writer w(sb);
  w.StartObject();
  key_str(w, "object", "list");
  w.Key("data");
  w.StartArray();
  write_model_card(w);
  for (const PeerModel& p : peers_) {
    if (p.hosted != nullptr) p.hosted->write_model_card(w);
  }
  w.EndArray();
  w.EndObject();
  channel->respond(json_reply(sb));
}

void OpenAIService::write_model_card(Writer& w) const {
  w.StartObject();
  key_str(w, "id", options_.served_model_name);
  key_str(w, "object", "model");
  w.Key("created");
  w.Int64(now_unix());
  key_str(w, "owned_by", "deltaserve");
  key_str(w, "root", options_.model_file_name.empty() ? options_.served_model_name : options_.model_file_name);
  w.Key("parent");
  w.Null();
  w.Key("max_model_len");
  w.Uint(engine_.health().max_context);
  key_str(w, "task",
          options_.model_kind == "embed"    ? "embed"
          : options_.model_kind == "rerank" ? "rerank"
                                            : "generate");
  w.EndObject();
}

void OpenAIService::ready(Channel channel) {
  EngineHealth h = engine_.health();
  std::string not_ready;
  if (!h.ready) {
    not_ready = std::to_string(h.workers_ready) + " of " + std::to_string(h.workers_total) + " workers are ready";
  }
  // Hosted peers count: the server is ready when every model it answers for is.
  for (const PeerModel& p : peers_) {
    if (p.hosted == nullptr) continue;
    const EngineHealth ph = p.hosted->engine_.health();
    if (!ph.ready && not_ready.empty()) {
      not_ready = std::to_string(ph.workers_ready) + " of " + std::to_string(ph.workers_total) + " workers of '" +
                  p.hosted->options_.served_model_name + "' are ready";
    }
    h.workers_ready += ph.workers_ready;
    h.workers_total += ph.workers_total;
  }
  if (!not_ready.empty()) throw ApiError(503, "Not ready: " + not_ready, {}, "not_ready");
  rapidjson::StringBuffer sb;
  Writer w(sb);
  w.StartObject();
  key_str(w, "status", "ready");
  w.Key("workers_ready");
  w.Uint(h.workers_ready);
  w.Key("workers_total");
  w.Uint(h.workers_total);
  w.EndObject();
  channel->respond(json_reply(sb));
}

void OpenAIService::prometheus(Channel channel) {
  channel->respond(
      HttpResponse{200, "text/plain; version=0.0.4; charset=utf-8", metrics_.render(engine_.health()), {}});
}

// vLLM's shape: {"prompt": ...} or {"messages": ...} → {"count","max_model_len","tokens","token_strs"}.
// Text longer than the context is refused like a prompt (the work stays bounded).
void OpenAIService::tokenize(const HttpRequest& request, Channel channel) {
  rapidjson::Document doc = parse_body(request.body);
  merge_extra_body(doc);
  check_model(get_string(doc, "model").value_or(""));
  std::vector<int32_t> ids;
  if (field(doc, "messages") != nullptr) {
    if (!field(doc, "messages")->IsArray()) throw ApiError(400, "'messages' must be an array", "messages");
    // Images count as the tokens they take (each is loaded and resized to know how many).
    std::vector<std::string> image_urls;
    const PromptText prompt = render_chat(doc, &image_urls);
    std::vector<PromptImage> images;
    ids = encode_chat(prompt, image_urls, &images);
  } else {
    const auto prompt = get_string(doc, "prompt");
    if (!prompt) throw ApiError(400, "'prompt' (a string) or 'messages' is required", "prompt");
    if (get_bool(doc, "add_special_tokens").value_or(true) && tokenizer_.add_bos() && tokenizer_.bos_id() >= 0) {
      ids.push_back(tokenizer_.bos_id());
    }
    const auto text_ids = encode_prompt(*prompt, prompt_budget(), "prompt");
    ids.insert(ids.end(), text_ids.begin(), text_ids.end());
  }
  const bool with_strs = get_bool(doc, "return_token_strs").value_or(false);
  rapidjson::StringBuffer sb;
  Writer w(sb);
  w.StartObject();
  w.Key("count");
  w.Uint64(ids.size());
  w.Key("max_model_len");
  w.Uint(engine_.health().max_context);
  w.Key("tokens");
  w.StartArray();
  for (const int32_t id : ids) w.Int(id);
  w.EndArray();
  w.Key("token_strs");
  if (with_strs) {
    w.StartArray();
    for (const int32_t id : ids) {
      const std::string s = sanitize_utf8(tokenizer_.token_piece(id, /*render_control=*/true));
      w.String(s.data(), static_cast<rapidjson::SizeType>(s.size()));
    }
    w.EndArray();
  } else {
    w.Null();
  }
  w.EndObject();
  channel->respond(json_reply(sb));
}

// {"tokens": [ids]} → {"prompt": text}; special tokens are rendered, as vLLM does.
void OpenAIService::detokenize(const HttpRequest& request, Channel channel) {
  rapidjson::Document doc = parse_body(request.body);
  check_model(get_string(doc, "model").value_or(""));
  const rapidjson::Value* tokens = field(doc, "tokens");
  if (tokens == nullptr || !tokens->IsArray()) throw ApiError(400, "'tokens' must be an array of token ids", "tokens");
  std::vector<int32_t> ids;
  for (const auto& v : tokens->GetArray()) {
    if (!v.IsInt() || v.GetInt() < 0 || v.GetInt() >= tokenizer_.n_vocab()) {
      throw ApiError(400, "'tokens' must hold token ids in [0, " + std::to_string(tokenizer_.n_vocab()) + ")",
                     "tokens");
    }
    ids.push_back(v.GetInt());
  }
  const std::string text = tokenizer_.decode(ids, /*render_control=*/true);
  rapidjson::StringBuffer sb;
  Writer w(sb);
  w.StartObject();
  key_str(w, "prompt", text);
  w.EndObject();
  channel->respond(json_reply(sb));
}

}  // namespace ds::openai
