// MTP speculation together with images, end to end (issue 31): `deltaserve serve --mmproj` with the
// tiny synthetic text model (which, unlike the VL fixture, has an MTP block) and the tiny synthetic
// vision tower, on 1 and 2 CPU workers, f32 KV. Greedy chat completions with PNG data URLs give the
// same 48 tokens with --spec-k 0 and --spec-k 2 / 3: verify rows, accepted drafts and rollbacks rope by the
// images' M-RoPE positions as prefill and plain decode do (MTP draft rows too, though a wrong draft
// position could only lower the acceptance, never change a greedy token). One image, two images,
// a second turn that hits the prefix cache, and image requests batched together. Every speculating
// reply must report drafts (usage.speculative) and some must be accepted (the text model is written
// with SynthShape::echo so that random-weight drafts can be), so the comparison cannot pass vacuously.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "common/base64.h"
#include "tests/coordinator/media/image_encoders.h"
#include "tests/e2e/json_body.h"
#include "tests/e2e/server_process.h"
#include "tools/synth/generate.h"
#include "tools/synth/mmproj.h"
#include "tools/synth/shapes.h"

namespace ds::test {
namespace {

// A width x height RGB PNG with a `seed`-dependent pattern, as a data URL.
std::string png_data_url(uint32_t width, uint32_t height, uint32_t seed) {
  PngSpec spec;
  spec.width = width;
  spec.height = height;
  spec.rows.resize(size_t{width} * height * 3);
  for (uint32_t y = 0; y < height; ++y) {
    for (uint32_t x = 0; x < width; ++x) {
      uint8_t* p = &spec.rows[(size_t{y} * width + x) * 3];
      p[0] = static_cast<uint8_t>(x * 255 / width);
      p[1] = static_cast<uint8_t>((y * 255 / height + seed * 53) % 256);
      p[2] = static_cast<uint8_t>((x * 7 + y * 13 + seed * 101) % 256);
    }
  }
  return "data:image/png;base64," + base64_encode(encode_png(spec));
}

// A user message: image parts, then a text part.
std::string user_message(const std::vector<std::string>& urls, const std::string& text) {
  std::string content = "[";
  for (const std::string& u : urls) content += R"({"type":"image_url","image_url":{"url":)" + json_string(u) + "}},";
  content += R"({"type":"text","text":)" + json_string(text) + "}]";
  return R"({"role":"user","content":)" + content + "}";
}

// Greedy, 48 tokens, every token named (logprobs), no early stop.
std::string chat_body(const std::vector<std::string>& messages) {
  std::string m = "[";
  for (size_t i = 0; i < messages.size(); ++i) m += (i ? "," : "") + messages[i];
  return R"({"messages":)" + m + R"(],"temperature":0,"max_tokens":48,"logprobs":true,"ignore_eos":true})";
}

struct ChatResult {
  int status = 0;
  std::string body = {};
  std::vector<std::string> tokens = {};  // each token's bytes, in order
  std::string content = {};
  uint64_t prompt_tokens = 0;
  uint64_t cached_tokens = 0;
  bool speculative = false;  // usage.speculative present
  uint64_t drafted = 0;
  uint64_t accepted = 0;
};

ChatResult chat(const ServerProcess& server, const std::string& body) {
  const HttpReply r = http_request(server.port(), "POST", "/v1/chat/completions", body);
  ChatResult out;
  out.status = r.status;
  out.body = r.body;
  if (r.status != 200) return out;
  const rapidjson::Document d = parse_json_body(r.body);
  if (!d.IsObject() || !d.HasMember("choices")) return out;
  const auto& c = d["choices"][0];
  if (c["message"]["content"].IsString()) out.content = c["message"]["content"].GetString();
  for (const auto& t : c["logprobs"]["content"].GetArray()) {
    std::string bytes;
    for (const auto& b : t["bytes"].GetArray()) bytes += static_cast<char>(b.GetInt());
    out.tokens.push_back(bytes);
  }
  const auto& u = d["usage"];
  out.prompt_tokens = u["prompt_tokens"].GetUint64();
  if (u.HasMember("prompt_tokens_details")) out.cached_tokens = u["prompt_tokens_details"]["cached_tokens"].GetUint64();
  if (u.HasMember("speculative")) {
    out.speculative = true;
    out.drafted = u["speculative"]["drafted_tokens"].GetUint64();
    out.accepted = u["speculative"]["accepted_tokens"].GetUint64();
  }
  return out;
}

// One server of the matrix.
struct Served {
  const char* name = "";
  uint32_t spec_k = 0;
  ServerProcess* server = nullptr;
};

class VisionSpecE2E : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // Names of this process's own: ctest runs each case as its own process, several at once, and
    // a file rewritten under a running server's mapping changes its weights mid-request.
    const std::filesystem::path dir = testing::TempDir();
    const std::string pid = std::to_string(::getpid());
    text_path_ = new std::string((dir / ("vision_spec_tiny_" + pid + ".gguf")).string());
    mmproj_path_ = new std::string((dir / ("vision_spec_mmproj_" + pid + ".gguf")).string());
    synth::SynthShape shape = synth::shape_by_name("tiny");
    ASSERT_EQ(shape.n_nextn, 1u);  // the MTP block --spec-k needs
    // Random MTP drafts are never accepted; leaning to repeat the input token, 10-25% of them are
    // (runs of a token, broken where the context, images included, decides).
    shape.echo = 0.8f;
    synth::write_synth_gguf(shape, *text_path_, 11, 2);
    synth::write_synth_mmproj(synth::mmproj_shape_by_name("mmproj-tiny"), *mmproj_path_, 12, 2);
    const auto start = [](const char* workers, uint32_t k) {
      return new ServerProcess({"--model", *text_path_, "--mmproj", *mmproj_path_, "--workers", workers, "--port", "0",
                                "--threads", "1", "--kv-cache-type", "f32", "--max-context", "1024", "--max-seqs", "4",
                                "--spec-k", std::to_string(k)});
    };
    servers_ = new std::vector<Served>{{"1 worker, --spec-k 0", 0, start("1", 0)},
                                       {"1 worker, --spec-k 2", 2, start("1", 2)},
                                       {"2 workers, --spec-k 0", 0, start("2", 0)},
                                       {"2 workers, --spec-k 3", 3, start("2", 3)}};
  }
  static void TearDownTestSuite() {
    if (servers_ != nullptr) {
      for (Served& s : *servers_) stop_servers({&s.server});
    }
    delete servers_;
    servers_ = nullptr;
    for (std::string** p : {&text_path_, &mmproj_path_}) {
      if (*p != nullptr) std::filesystem::remove(**p);
      delete *p;
      *p = nullptr;
    }
  }

  // Sends `body` to every server; each reply must be a 200 with 48 tokens, the tokens of the
  // first (1 worker, no speculation), and the speculating ones must report drafts. Returns the
  // replies in server order.
  static std::vector<ChatResult> expect_same_tokens_everywhere(const std::string& body, const std::string& what) {
    std::vector<ChatResult> out;
    for (const Served& s : *servers_) out.push_back(chat(*s.server, body));
    expect_same(out, what);
    return out;
  }

  // Also: the speculating servers' drafts, some of them accepted (over the replies of one call,
  // so a verify step whose bonus row and accepted drafts count is part of every comparison).
  static void expect_same(const std::vector<ChatResult>& replies, const std::string& what) {
    ASSERT_EQ(replies.size(), servers_->size());
    uint64_t accepted = 0;
    for (const ChatResult& r : replies) accepted += r.accepted;
    EXPECT_GT(accepted, 0u) << what << ": no draft accepted, the test would not see an accepted draft's rows";
    for (size_t i = 0; i < replies.size(); ++i) {
      const Served& s = (*servers_)[i];
      const ChatResult& r = replies[i];
      ASSERT_EQ(r.status, 200) << what << ", " << s.name << ": " << r.body.substr(0, 400);
      ASSERT_EQ(r.tokens.size(), 48u) << what << ", " << s.name;
      EXPECT_EQ(r.tokens, replies[0].tokens) << what << ": " << s.name << " differs from " << (*servers_)[0].name;
      EXPECT_EQ(r.content, replies[0].content) << what << ", " << s.name;
      EXPECT_EQ(r.prompt_tokens, replies[0].prompt_tokens) << what << ", " << s.name;
      EXPECT_EQ(r.speculative, s.spec_k > 0) << what << ", " << s.name << ": " << r.body.substr(0, 400);
      if (s.spec_k > 0) {
        // 48 tokens take at least 12 verify steps (at most k + 1 <= 4 tokens a step), each drafting.
        EXPECT_GE(r.drafted, 12u) << what << ", " << s.name;
        EXPECT_LE(r.accepted, r.drafted) << what << ", " << s.name;
        std::fprintf(stderr, "[vision spec e2e] %s, %s: %lu drafted, %lu accepted\n", what.c_str(), s.name,
                     static_cast<unsigned long>(r.drafted), static_cast<unsigned long>(r.accepted));
      }
    }
  }

  static std::string* text_path_;
  static std::string* mmproj_path_;
  static std::vector<Served>* servers_;
};
std::string* VisionSpecE2E::text_path_ = nullptr;
std::string* VisionSpecE2E::mmproj_path_ = nullptr;
std::vector<Served>* VisionSpecE2E::servers_ = nullptr;

// 320 x 224 is 10 x 7 merged tokens (h != w: the text after it continues at +10, not +70).
const std::string& image_a() {
  static const std::string url = png_data_url(320, 224, 1);
  return url;
}
// 256 x 288: 8 x 9 tokens.
const std::string& image_b() {
  static const std::string url = png_data_url(256, 288, 2);
  return url;
}

TEST_F(VisionSpecE2E, OneImageGivesTheSameTokensWithSpeculation) {
  const std::vector<ChatResult> r =
      expect_same_tokens_everywhere(chat_body({user_message({image_a()}, "Describe the picture.")}), "one image");
  ASSERT_FALSE(r.empty());
  EXPECT_GT(r[0].prompt_tokens, 70u);  // the image's 70 tokens and the text
  // The image reaches the tokens: another image, same text, gives others.
  const ChatResult other =
      chat(*(*servers_)[0].server, chat_body({user_message({image_b()}, "Describe the picture.")}));
  ASSERT_EQ(other.status, 200) << other.body;
  EXPECT_NE(other.tokens, r[0].tokens);
}

TEST_F(VisionSpecE2E, TwoImagesGiveTheSameTokensWithSpeculation) {
  const std::vector<ChatResult> r = expect_same_tokens_everywhere(
      chat_body({user_message({image_a(), image_b()}, "What differs between them?")}), "two images");
  ASSERT_FALSE(r.empty());
  EXPECT_GT(r[0].prompt_tokens, 70u + 72u);
}

// The second turn of a conversation: its prompt starts with the first turn's, image included, so
// it hits the prefix cache (blocks and GDN snapshot keyed by the image) on every server, and the
// speculating servers continue from the cached state (the MTP catch-up over the new rows too).
TEST_F(VisionSpecE2E, SecondTurnHitsThePrefixCacheWithTheSameTokens) {
  const std::string first = user_message({image_a()}, "Here is a photo. What is in it?");
  const std::vector<ChatResult> turn1 = expect_same_tokens_everywhere(chat_body({first}), "first turn");
  ASSERT_FALSE(turn1.empty());
  const std::string reply = R"({"role":"assistant","content":)" + json_string(turn1[0].content) + "}";
  const std::string second = user_message({image_b()}, "And this one, compared with the first?");
  const std::vector<ChatResult> turn2 =
      expect_same_tokens_everywhere(chat_body({first, reply, second}), "second turn (two images over two turns)");
  for (size_t i = 0; i < turn2.size(); ++i) {
    EXPECT_GE(turn2[i].cached_tokens, 64u) << (*servers_)[i].name << ": past the first image's 70 tokens";
    EXPECT_LT(turn2[i].cached_tokens, turn2[i].prompt_tokens) << (*servers_)[i].name;
  }
  // The same second turn again: a longer hit (through the second image), the same tokens.
  const std::vector<ChatResult> again =
      expect_same_tokens_everywhere(chat_body({first, reply, second}), "second turn repeated");
  for (size_t i = 0; i < again.size(); ++i) {
    EXPECT_EQ(again[i].tokens, turn2[i].tokens) << (*servers_)[i].name;
    EXPECT_GT(again[i].cached_tokens, turn2[i].cached_tokens) << (*servers_)[i].name;
  }
}

// Three image requests at once on each server: verify rows of sequences with different images
// (and one without) batched in one step, each with its own positions.
TEST_F(VisionSpecE2E, ConcurrentImageRequestsGiveTheSameTokens) {
  const std::vector<std::string> bodies = {
      chat_body({user_message({image_b()}, "Tell a story about this.")}),
      chat_body({user_message({image_a(), image_b()}, "Two pictures: compare.")}),
      chat_body({user_message({}, "No picture this time, just text.")}),
  };
  std::vector<std::vector<ChatResult>> got(bodies.size(), std::vector<ChatResult>(servers_->size()));
  std::vector<std::thread> threads;
  for (size_t b = 0; b < bodies.size(); ++b) {
    for (size_t s = 0; s < servers_->size(); ++s) {
      threads.emplace_back([&, b, s] { got[b][s] = chat(*(*servers_)[s].server, bodies[b]); });
    }
  }
  for (std::thread& t : threads) t.join();
  for (size_t b = 0; b < bodies.size(); ++b) expect_same(got[b], "concurrent request " + std::to_string(b));
}

}  // namespace
}  // namespace ds::test
