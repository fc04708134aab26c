// `deltaserve serve`'s remote-image options (issue 31): --allowed-media-domains (off by default,
// each entry checked and normalized, a bad one refused with the reason) and
// --media-fetch-timeout (seconds, fractions allowed, default 10).
#include <gtest/gtest.h>

#include <chrono>
#include <initializer_list>
#include <map>
#include <string>
#include <vector>

#include "coordinator/app/serve_options.h"

namespace ds {
namespace {

using Env = std::map<std::string, std::string>;

bool parse(std::initializer_list<std::string> args, const Env& env, ServeOptions* o, std::string* error) {
  std::vector<std::vector<char>> storage;
  std::vector<char*> argv;
  for (const std::string& a : args) storage.emplace_back(a.c_str(), a.c_str() + a.size() + 1);
  for (auto& a : storage) argv.push_back(a.data());
  bool help = false;
  return parse_serve_options(static_cast<int>(argv.size()), argv.data(), env, o, error, &help);
}

TEST(ServeMediaOptions, RemoteImagesAreOffByDefault) {
  ServeOptions o;
  std::string error;
  ASSERT_TRUE(parse({"--model", "m.gguf"}, {}, &o, &error)) << error;
  EXPECT_TRUE(o.http.vision.allowed_media_domains.empty());
  EXPECT_EQ(o.http.vision.media_fetch_timeout, std::chrono::milliseconds(10'000));
  const std::string line = describe(o);
  EXPECT_NE(line.find(" allowed_media_domains=(off) "), std::string::npos) << line;
  EXPECT_NE(line.find(" media_fetch_timeout=10"), std::string::npos) << line;
}

TEST(ServeMediaOptions, DomainsAreNormalizedFromAFlagOrTheEnvironment) {
  ServeOptions o;
  std::string error;
  ASSERT_TRUE(parse({"--model", "m.gguf", "--allowed-media-domains", "Images.Example.com, *.CDN.net,127.0.0.1,[::1]",
                     "--media-fetch-timeout", "2.5"},
                    {}, &o, &error))
      << error;
  EXPECT_EQ(o.http.vision.allowed_media_domains,
            (std::vector<std::string>{"images.example.com", "*.cdn.net", "127.0.0.1", "::1"}));
  EXPECT_EQ(o.http.vision.media_fetch_timeout, std::chrono::milliseconds(2500));
  ServeOptions from_env;
  ASSERT_TRUE(parse({"--model", "m.gguf"}, {{"DELTASERVE_ALLOWED_MEDIA_DOMAINS", "example.com"}}, &from_env, &error))
      << error;
  EXPECT_EQ(from_env.http.vision.allowed_media_domains, std::vector<std::string>{"example.com"});
}

TEST(ServeMediaOptions, BadDomainEntriesAreRefusedWithTheReason) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"a.com,,b.com", "an entry is empty"},
      {"a.com,", "an entry is empty"},
      {"https://a.com", "'https://a.com' is a URL"},
      {"a.com/images", "holds a path"},
      {"a.com:8080", "holds a port"},
      {"*", "would allow every host"},
      {"a*.com", "'*'"},
  };
  for (const auto& [value, reason] : cases) {
    ServeOptions o;
    std::string error;
    EXPECT_FALSE(parse({"--model", "m.gguf", "--allowed-media-domains", value}, {}, &o, &error)) << value;
    EXPECT_NE(error.find("--allowed-media-domains: "), std::string::npos) << error;
    EXPECT_NE(error.find(reason), std::string::npos) << value << ": " << error;
  }
}

TEST(ServeMediaOptions, BadTimeoutsAreRefused) {
  for (const std::string bad : {"0", "-1", "abc", "3601", ""}) {
    ServeOptions o;
    std::string error;
    EXPECT_FALSE(parse({"--model", "m.gguf", "--media-fetch-timeout", bad}, {}, &o, &error)) << bad;
    EXPECT_NE(error.find("bad value '" + bad + "' for media-fetch-timeout"), std::string::npos) << error;
  }
}

}  // namespace
}  // namespace ds
