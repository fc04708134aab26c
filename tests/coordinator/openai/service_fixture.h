// Shared set-up for OpenAIService tests: the fixture GGUF's tokenizer and chat template, a
// FakeEngine, and helpers to call routes and read JSON replies.
#pragma once

#include <gtest/gtest.h>
#include <rapidjson/document.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "common/gguf.h"
#include "coordinator/chat_template/chat_template.h"
#include "coordinator/openai/service.h"
#include "coordinator/tokenizer/tokenizer.h"
#include "tests/coordinator/openai/fake_engine.h"
#include "tests/coordinator/openai/recording_channel.h"
#include "tests/testutil/testutil.h"

namespace ds::test {

struct ModelFixture {
  Tokenizer tokenizer;
  ChatTemplate chat_template;

  static const ModelFixture& get() {
    static const ModelFixture* f = [] {
      const GgufFile gguf = GgufFile::open(tiny_model_path());
      return new ModelFixture{Tokenizer(gguf), ChatTemplate::from_gguf(gguf)};
    }();
    return *f;
  }
};

class ServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    options_.served_model_name = "tiny";
    options_.model_file_name = "tiny-qwen35-q8_0.gguf";
    make_service();
  }
  void TearDown() override {
    engine_.join();  // engine threads call into the service's responders
    service_.reset();
  }

  void make_service() {
    engine_.join();
    service_ =
        std::make_unique<openai::OpenAIService>(options_, engine_, tok(), ModelFixture::get().chat_template, metrics_);
  }

  const Tokenizer& tok() const { return ModelFixture::get().tokenizer; }
  // Token ids the fake engine will "generate" (control tokens such as <tool_call> parsed).
  std::vector<int32_t> ids(const std::string& text) const { return tok().encode(text, true); }
  int32_t im_end() const { return *tok().find_token("<|im_end|>"); }

  void script(const std::string& text, bool end_with_eog = true) {
    FakeScript s;
    s.tokens = ids(text);
    if (end_with_eog) {
      s.tokens.push_back(im_end());
      s.stop_ids = {im_end()};
    }
    engine_.set_script(s);
  }

  std::shared_ptr<RecordingChannel> call(const std::string& method, const std::string& path,
                                         const std::string& body = "",
                                         std::vector<std::pair<std::string, std::string>> headers = {}) {
    auto channel = std::make_shared<RecordingChannel>();
    HttpRequest r;
    r.method = method;
    r.path = path;
    r.body = body;
    r.headers = std::move(headers);
    // POST bodies are JSON (the router answers 415 otherwise); tests of that pass their own.
    const bool has_type =
        std::any_of(r.headers.begin(), r.headers.end(), [](const auto& h) { return h.first == "content-type"; });
    if (method == "POST" && !has_type) r.headers.emplace_back("content-type", "application/json");
    last_hook_ = service_->handler().handle(std::move(r), channel);
    EXPECT_TRUE(channel->wait()) << method << " " << path << " did not complete";
    return channel;
  }
  std::shared_ptr<RecordingChannel> post(const std::string& path, const std::string& body) {
    return call("POST", path, body);
  }

  static rapidjson::Document json(const std::string& s) {
    rapidjson::Document d;
    d.Parse(s.c_str(), s.size());
    EXPECT_FALSE(d.HasParseError()) << s;
    return d;
  }
  static std::string str(const rapidjson::Value& v) {
    return v.IsString() ? std::string(v.GetString(), v.GetStringLength()) : "<not a string>";
  }

  ServerOptions options_;
  FakeEngine engine_;
  ServerMetrics metrics_;
  std::unique_ptr<openai::OpenAIService> service_;
  DisconnectHook last_hook_;
};

}  // namespace ds::test
