#include "coordinator/openai/service.h"

#include <cstdio>
#include <optional>
#include <random>

#include "common/log.h"
#include "coordinator/chat_template/chat_input.h"
#include "coordinator/http/api_error.h"
#include "coordinator/openai/json_fields.h"
#include "coordinator/openai/output_stream.h"
#include "coordinator/openai/responder.h"
#include "coordinator/openai/submission.h"
#include "coordinator/openai/vision_input.h"
#include "coordinator/structured/token_trie.h"

namespace ds::openai {

namespace {

// When the engine does not report its context size.
constexpr uint32_t kFallbackMaxTokens = 16384;

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The generation prompt opened a reasoning block: the model's first tokens are reasoning.
bool prompt_opens_thinking(const std::string& prompt) {
  return ends_with(prompt, "<think>\n") || ends_with(prompt, "<think>");
}

HttpResponse queue_full_response() {
  HttpResponse r = error_response(ApiError(429, "The server is overloaded: too many requests are waiting; retry later",
                                           {}, "rate_limit_exceeded", "rate_limit_error"));
  r.headers.emplace_back("Retry-After", "1");
  return r;
}

// The body, with `extra_body` folded into it.
rapidjson::Document parse_request(const HttpRequest& request) {
  rapidjson::Document doc = parse_body(request.body);
  merge_extra_body(doc);
  return doc;
}

// reasoning_effort is applied as chat_template_kwargs.enable_thinking (the parser resolved it
// only where the request does not set that explicitly).
void set_enable_thinking(rapidjson::Document& doc, bool on) {
  auto& alloc = doc.GetAllocator();
  auto kwargs = doc.FindMember("chat_template_kwargs");
  if (kwargs == doc.MemberEnd()) {
    doc.AddMember("chat_template_kwargs", rapidjson::Value(rapidjson::kObjectType), alloc);
    kwargs = doc.FindMember("chat_template_kwargs");
  } else if (!kwargs->value.IsObject()) {
    kwargs->value.SetObject();  // null: not given
  }
  auto it = kwargs->value.FindMember("enable_thinking");
  if (it != kwargs->value.MemberEnd()) {
    it->value.SetBool(on);  // null: not given
  } else {
    kwargs->value.AddMember("enable_thinking", on, alloc);
  }
}

std::string context_exceeded(uint32_t context, size_t at_least) {
  return "This model's maximum context length is " + std::to_string(context) + " tokens, but the prompt has at least " +
         std::to_string(at_least) + " tokens";
}

}  // namespace

OpenAIService::OpenAIService(const ServerOptions& options, Engine& engine, const Tokenizer& tokenizer,
                             const ChatTemplate& chat_template, ServerMetrics& metrics)
    : options_(options),
      engine_(engine),
      tokenizer_(tokenizer),
      chat_template_(chat_template),
      metrics_(metrics),
      router_(options.api_key, &metrics),
      id_salt_((static_cast<uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}()),
      request_threads_(std::make_unique<TaskThread>(options.request_threads)) {
  add_routes();
}

OpenAIService::~OpenAIService() = default;

void OpenAIService::add_routes() {
  router_.add("POST", "/v1/chat/completions", [this](HttpRequest& r, Channel c) {
    return offload(r, std::move(c), true, [this](const HttpRequest& req, const Channel& ch, Clock::time_point t) {
      return chat_completions(req, ch, t);
    });
  });
  router_.add("POST", "/v1/completions", [this](HttpRequest& r, Channel c) {
    return offload(r, std::move(c), true, [this](const HttpRequest& req, const Channel& ch, Clock::time_point t) {
      return completions(req, ch, t);
    });
  });
  router_.add("GET", "/v1/models", [this](HttpRequest&, Channel c) {
    list_models(std::move(c));
    return DisconnectHook{};
  });
  router_.add(
      "GET", "/health",
      [](HttpRequest&, Channel c) {
        c->respond(HttpResponse{200, "application/json", R"({"status":"ok"})", {}});
        return DisconnectHook{};
      },
      /*is_public=*/true);
  router_.add("GET", "/ready", [this](HttpRequest&, Channel c) {
    ready(std::move(c));
    return DisconnectHook{};
  });
  router_.add("GET", "/metrics", [this](HttpRequest&, Channel c) {
    prometheus(std::move(c));
    return DisconnectHook{};
  });
  router_.add("POST", "/tokenize", [this](HttpRequest& r, Channel c) {
    return offload(r, std::move(c), false, [this](const HttpRequest& req, const Channel& ch, Clock::time_point) {
      tokenize(req, ch);
      return DisconnectHook{};
    });
  });
  router_.add("POST", "/detokenize", [this](HttpRequest& r, Channel c) {
    return offload(r, std::move(c), false, [this](const HttpRequest& req, const Channel& ch, Clock::time_point) {
      detokenize(req, ch);
      return DisconnectHook{};
    });
  });
  add_pooling_routes();
}

DisconnectHook OpenAIService::offload(HttpRequest& request, Channel channel, bool admitted, Work work) {
  const Clock::time_point arrival = Clock::now();
  std::shared_ptr<void> ticket;
  if (admitted) {
    // Shed load first and cheaply: nothing is parsed for a request that cannot wait.
    ticket = admission_.try_enter(engine_.health().queue_depth, options_.max_queue);
    if (!ticket) {
      channel->respond(queue_full_response());
      return {};
    }
  }
  auto deferred = std::make_shared<DeferredHook>();
  request_threads_->post([deferred, ticket, arrival, request = std::move(request), channel = std::move(channel),
                          work = std::move(work)]() mutable {
    if (!deferred->wanted()) return;  // the client left while the request waited for a thread
    try {
      deferred->set(work(request, channel, arrival));
    } catch (const ApiError& e) {
      channel->respond(error_response(e));  // the router's channel ignores a second reply
    } catch (const std::exception& e) {
      channel->respond(error_response(500, std::string("Internal error: ") + e.what()));
    } catch (...) {
      channel->respond(error_response(500, "Internal error"));
    }
    ticket.reset();  // submitted (the engine counts it now) or answered
  });
  return DeferredHook::make(deferred);
}

void OpenAIService::check_model(const std::string& model) const {
  if (model.empty() || model == options_.served_model_name) return;
  const std::string& file = options_.model_file_name;
  if (!file.empty()) {
    if (model == file) return;
    if (ends_with(file, ".gguf") && model == file.substr(0, file.size() - 5)) return;
  }
  throw ApiError(404,
                 "The model '" + model + "' does not exist (this server serves '" + options_.served_model_name + "')",
                 "model", "model_not_found");
}

PromptText OpenAIService::render_chat(const rapidjson::Value& request, std::vector<std::string>* image_urls) const {
  try {
    const ChatRequestInput input = chat_input_from_request(request);
    if (!input.image_urls.empty() && !options_.vision.enabled) {
      throw ApiError(400, "Image inputs are not supported by this server: it was started without --mmproj", "messages");
    }
    *image_urls = input.image_urls;
    // Every template renders the users' text (directives already stripped), so its bytes bound
    // the prompt's tokens from below.
    size_t user_bytes = 0;
    for (const jinja::Value& m : input.messages.as_list()) {
      const jinja::Value* role = m.as_dict().find("role");
      const jinja::Value* content = m.as_dict().find("content");
      if (role != nullptr && content != nullptr && role->is_string() && content->is_string() &&
          role->as_text().str() == "user") {
        user_bytes += content->as_text().size();
      }
    }
    const size_t budget = prompt_budget();
    if (budget != Tokenizer::kNoBudget && tokenizer_.min_tokens(user_bytes) > budget) {
      throw ApiError(400, context_exceeded(engine_.health().max_context, tokenizer_.min_tokens(user_bytes)), "messages",
                     "context_length_exceeded");
    }
    return chat_template_.render(input);
  } catch (const RequestError& e) {
    throw ApiError(400, e.what(), "messages");
  } catch (const TemplateRaise& e) {
    throw ApiError(400, e.what(), "messages");
  } catch (const TemplateError& e) {
    // Usually request data the template cannot handle (e.g. odd tool arguments).
    throw ApiError(400, std::string("Chat template error: ") + e.what(), "messages");
  }
}

std::vector<int32_t> OpenAIService::encode_chat(const PromptText& prompt, const std::vector<std::string>& image_urls,
                                                std::vector<PromptImage>* images) const {
  // The image limits first: decoding is the costly part of a hostile request.
  const std::vector<PreparedImage> prepared = prepare_images(image_urls, options_.vision);
  const std::vector<int32_t> ids = encode_prompt(prompt, "messages");
  if (prepared.empty()) return ids;
  uint64_t image_tokens = 0;
  for (const PreparedImage& im : prepared) image_tokens += im.n_tokens();
  const size_t budget = prompt_budget();
  const uint64_t total = ids.size() - prepared.size() + image_tokens;
  if (budget != Tokenizer::kNoBudget && total > budget) {
    throw ApiError(400,
                   "This model's maximum context length is " + std::to_string(engine_.health().max_context) +
                       " tokens, but the prompt has " + std::to_string(total) + " tokens, " +
                       std::to_string(image_tokens) + " of them for " + std::to_string(prepared.size()) +
                       " images (--image-max-tokens bounds each image)",
                   "messages", "context_length_exceeded");
  }
  return expand_image_pads(ids, prepared, options_.vision.image_token_id, images);
}

size_t OpenAIService::prompt_budget() const {
  const uint32_t context = engine_.health().max_context;
  return context == 0 ? Tokenizer::kNoBudget : context - 1;  // a prompt must leave room for a token
}

std::vector<int32_t> OpenAIService::encode_prompt(const PromptText& prompt, const char* prompt_param) const {
  try {
    return tokenizer_.encode(prompt, prompt_budget());
  } catch (const TokenBudgetExceeded& e) {
    throw ApiError(400, context_exceeded(engine_.health().max_context, e.at_least()), prompt_param,
                   "context_length_exceeded");
  }
}

std::vector<int32_t> OpenAIService::encode_prompt(const std::string& text, size_t budget,
                                                  const char* prompt_param) const {
  try {
    return tokenizer_.encode(text, /*parse_control=*/true, budget);
  } catch (const TokenBudgetExceeded& e) {
    throw ApiError(400, context_exceeded(engine_.health().max_context, e.at_least()), prompt_param,
                   "context_length_exceeded");
  }
}

uint32_t OpenAIService::resolve_max_tokens(const CommonParams& params, size_t prompt_tokens,
                                           const char* prompt_param) const {
  const uint32_t context = engine_.health().max_context;
  if (context == 0) return params.max_tokens.value_or(kFallbackMaxTokens);
  if (prompt_tokens >= context) {
    throw ApiError(400,
                   "This model's maximum context length is " + std::to_string(context) +
                       " tokens, but the prompt has " + std::to_string(prompt_tokens) + " tokens",
                   prompt_param, "context_length_exceeded");
  }
  const uint32_t room = context - static_cast<uint32_t>(prompt_tokens);
  if (!params.max_tokens) return room;
  if (*params.max_tokens > room) {
    throw ApiError(400,
                   "This model's maximum context length is " + std::to_string(context) + " tokens; the prompt has " +
                       std::to_string(prompt_tokens) + " tokens, so max_tokens may be at most " + std::to_string(room),
                   "max_tokens", "context_length_exceeded");
  }
  return *params.max_tokens;
}

std::string OpenAIService::new_request_id(const char* prefix) {
  const uint64_t n = next_id_.fetch_add(1);
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%016llx%016llx", static_cast<unsigned long long>(splitmix64(id_salt_ ^ n)),
                static_cast<unsigned long long>(splitmix64(id_salt_ + 0x51ed27 * (n + 1))));
  return std::string(prefix) + buf;
}

int64_t OpenAIService::now_unix() const {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::optional<OutputConstraint> OpenAIService::output_constraint(const CommonParams& params, bool thinking) {
  if (!params.structured.active()) return std::nullopt;
  OutputConstraint c;
  c.grammar = grammars_.compile(params.structured);
  std::call_once(vocab_once_, [this] {
    vocab_ = std::make_shared<const structured::TokenVocab>(structured::from_tokenizer(tokenizer_));
  });
  c.vocab = vocab_;
  if (thinking) c.starts_after = tokenizer_.find_token("</think>").value_or(-1);
  return c;
}

DisconnectHook OpenAIService::generate(bool chat, const char* id_prefix, const char* prompt_param,
                                       std::vector<int32_t> prompt_ids, CommonParams& params,
                                       std::optional<OutputParserOptions> parser, Channel channel,
                                       std::chrono::steady_clock::time_point arrival, std::vector<PromptImage> images) {
  check_token_ids(params.sampling, tokenizer_.n_vocab());
  if (params.n > options_.max_n) {
    throw ApiError(400, "'n' may be at most " + std::to_string(options_.max_n) + " on this server (--max-n)", "n");
  }
  Submission s;
  s.request.request_id = new_request_id(id_prefix);
  s.request.prompt_ids = std::move(prompt_ids);
  s.request.images = std::move(images);
  s.request.sampling = params.sampling;
  s.request.constraint = output_constraint(params, parser && parser->thinking_open);
  s.request.sampling.max_tokens = resolve_max_tokens(params, s.request.prompt_ids.size(), prompt_param);
  const bool echo_only = s.request.sampling.max_tokens == 0;  // completions' echo: the engine still makes one
  if (echo_only) s.request.sampling.max_tokens = 1;
  s.config = {chat,
              params.stream,
              params.include_usage,
              params.sampling.logprobs,
              {s.request.request_id, options_.served_model_name, now_unix()},
              static_cast<uint32_t>(s.request.prompt_ids.size()),
              /*counts_prompt_tokens=*/true,
              arrival};
  s.config.echo_only = echo_only;
  if (params.sampling.prompt_logprobs) s.config.first_prompt_token = s.request.prompt_ids.front();
  s.parser = std::move(parser);
  s.stop = std::move(params.stop);
  s.echo = std::move(params.echo_text);
  s.n = params.n;
  return submit(engine_, deferred_, tokenizer_, metrics_, std::move(s), std::move(channel));
}

DisconnectHook OpenAIService::chat_completions(const HttpRequest& request, Channel channel, Clock::time_point arrival) {
  if (options_.model_kind != "chat") wrong_model_kind("chat");
  rapidjson::Document doc = parse_request(request);
  ChatParams params = parse_chat_params(doc);
  check_model(params.model);
  if (params.enable_thinking) set_enable_thinking(doc, *params.enable_thinking);
  std::vector<std::string> image_urls;
  const PromptText prompt = render_chat(doc, &image_urls);
  std::vector<PromptImage> images;
  std::vector<int32_t> ids = encode_chat(prompt, image_urls, &images);

  OutputParserOptions parser;
  parser.thinking_open = prompt_opens_thinking(prompt.text);
  parser.tools_enabled = params.has_tools && params.tool_choice != ToolChoice::kNone;
  parser.tools = std::move(params.tools);
  parser.parallel_tool_calls = params.parallel_tool_calls;
  return generate(true, "chatcmpl-", "messages", std::move(ids), params, std::move(parser), std::move(channel), arrival,
                  std::move(images));
}

DisconnectHook OpenAIService::completions(const HttpRequest& request, Channel channel, Clock::time_point arrival) {
  if (options_.model_kind != "chat") wrong_model_kind("chat");
  rapidjson::Document doc = parse_request(request);
  CompletionParams params = parse_completion_params(doc);
  check_model(params.model);

  std::vector<int32_t> ids;
  if (params.prompt_text) {
    // Raw completion prompts may spell control tokens (the caller owns the whole prompt).
    if (tokenizer_.add_bos() && tokenizer_.bos_id() >= 0) ids.push_back(tokenizer_.bos_id());
    const size_t budget = prompt_budget();
    const std::vector<int32_t> text_ids = encode_prompt(
        *params.prompt_text, budget == Tokenizer::kNoBudget ? budget : budget - std::min(budget, ids.size()), "prompt");
    ids.insert(ids.end(), text_ids.begin(), text_ids.end());
  } else {
    ids = std::move(params.prompt_ids);
    for (const int32_t id : ids) {
      if (id < 0 || id >= tokenizer_.n_vocab()) {
        throw ApiError(400,
                       "Token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                           std::to_string(tokenizer_.n_vocab()) + ")",
                       "prompt");
      }
    }
  }
  if (ids.empty()) throw ApiError(400, "The prompt is empty", "prompt");
  // echo: the prompt as given, or the text of its token ids.
  if (params.echo) {
    params.echo_text = params.prompt_text ? *params.prompt_text : tokenizer_.decode(ids, /*render_control=*/true);
  }

  return generate(false, "cmpl-", "prompt", std::move(ids), params, std::nullopt, std::move(channel), arrival);
}

}  // namespace ds::openai
