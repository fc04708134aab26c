// The layered option parser (common/options.h): flag > environment > config file > default, the
// forms of a flag, switches, errors naming the option and its source, the help text and the
// start-up summary with secrets masked; the KV cache type flags built on it (common/kv_options.h).
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <initializer_list>
#include <map>
#include <string>
#include <vector>

#include "common/kv_options.h"
#include "common/model_config.h"
#include "common/options.h"
#include "common/stage_footprint.h"  // kv_bytes_per_token

namespace ds {
namespace {

struct Toy {
  int port = 8000;
  std::string name = "toy";
  std::string key;
  bool fast = false;
};

OptionTable toy_table(Toy* t) {
  return {
      {"port", "P", "TCP port",
       [t](const std::string& v) {
         try {
           size_t used = 0;
           t->port = std::stoi(v, &used);
           return used == v.size() && t->port > 0;
         } catch (...) {
           return false;
         }
       },
       [t] { return std::to_string(t->port); }},
      {"name", "S", "what to call it\nsecond line",
       [t](const std::string& v) {
         t->name = v;
         return !v.empty();
       },
       [t] { return t->name; }},
      {"api-key", "KEY", "the secret",
       [t](const std::string& v) {
         t->key = v;
         return true;
       },
       [t] { return t->key.empty() ? std::string("(none)") : t->key; }, "-", /*secret=*/true},
      {"fast", "", "a switch",
       [t](const std::string& v) {
         if (v == "true" || v == "1") return t->fast = true, true;
         if (v == "false" || v == "0") return t->fast = false, true;
         return false;
       },
       [t] { return std::string(t->fast ? "yes" : "no"); }},
  };
}

OptionParser toy_parser(bool strict = true, bool combined = false) {
  OptionParser p;
  p.usage = "usage: toy [options]";
  p.env_prefix = "TOY_";
  p.strict_environment = strict;
  p.combined_errors = combined;
  return p;
}

ParsedOptions parse(Toy* t, std::initializer_list<std::string> args, const std::map<std::string, std::string>& env = {},
                    const OptionParser& parser = toy_parser()) {
  std::vector<std::vector<char>> storage;
  std::vector<char*> argv;
  for (const std::string& a : args) storage.emplace_back(a.begin(), a.end());
  for (auto& a : storage) {
    a.push_back('\0');
    argv.push_back(a.data());
  }
  return parse_options(parser, toy_table(t), static_cast<int>(argv.size()), argv.data(), env);
}

std::string write_file(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

TEST(Options, FlagBeatsEnvironmentBeatsFileBeatsDefault) {
  const std::string path = write_file("toy.conf", "# toy\nport = 1\nname = from-file\n\napi-key = k\n");
  Toy t;
  const ParsedOptions r = parse(&t, {"--config", path, "--port=3"}, {{"TOY_PORT", "2"}, {"TOY_NAME", "from-env"}});
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(t.port, 3);
  EXPECT_EQ(t.name, "from-env");
  EXPECT_EQ(t.key, "k");
  EXPECT_EQ(r.set_by.at("port"), OptionSource::kFlag);
  EXPECT_EQ(r.set_by.at("name"), OptionSource::kEnvironment);
  EXPECT_EQ(r.set_by.at("api-key"), OptionSource::kFile);
  EXPECT_EQ(r.set_by.count("fast"), 0u);
  // The file can also come from <prefix>CONFIG; the flag wins over it.
  Toy from_env_file;
  ASSERT_TRUE(parse(&from_env_file, {}, {{"TOY_CONFIG", path}}).ok);
  EXPECT_EQ(from_env_file.port, 1);
}

TEST(Options, FlagFormsAndSwitches) {
  Toy t;
  ASSERT_TRUE(parse(&t, {"--port", "5", "--fast", "--name=a=b"}).ok);
  EXPECT_EQ(t.port, 5);
  EXPECT_TRUE(t.fast);
  EXPECT_EQ(t.name, "a=b");
  ASSERT_TRUE(parse(&t, {"--fast=false"}).ok);
  EXPECT_FALSE(t.fast);
  Toy u;
  const ParsedOptions missing = parse(&u, {"--port"});
  EXPECT_FALSE(missing.ok);
  EXPECT_NE(missing.error.find("--port needs a value"), std::string::npos) << missing.error;
  EXPECT_NE(parse(&u, {"port"}).error.find("unexpected argument 'port'"), std::string::npos);
  const ParsedOptions help = parse(&u, {"--port", "1", "-h"});
  EXPECT_TRUE(help.help);
  EXPECT_NE(help.error.find("usage: toy"), std::string::npos);
}

TEST(Options, ErrorsNameTheOptionAndTheSource) {
  Toy t;
  EXPECT_NE(parse(&t, {"--port", "x"}).error.find("--port: bad value 'x' for port"), std::string::npos);
  EXPECT_NE(parse(&t, {"--nope", "1"}).error.find("--nope: unknown option 'nope'"), std::string::npos);
  EXPECT_NE(parse(&t, {}, {{"TOY_PORT", "-1"}}).error.find("environment TOY_PORT: bad value '-1' for port"),
            std::string::npos);
  const std::string path = write_file("toy_bad.conf", "port = 1\n\nname =\n");
  EXPECT_NE(parse(&t, {"--config", path}).error.find(path + ":3: bad value '' for name"), std::string::npos);
  EXPECT_NE(parse(&t, {"--config", "/nonexistent/toy.conf"}).error.find("cannot read config file"), std::string::npos);
  // A secret's value never appears in an error.
  Toy s;
  auto table = toy_table(&s);
  table[2].set = [](const std::string&) { return false; };
  char flag[] = "--api-key", value[] = "hunter2";
  char* argv[] = {flag, value};
  const ParsedOptions r = parse_options(toy_parser(), table, 2, argv, {});
  EXPECT_EQ(r.error.find("hunter2"), std::string::npos) << r.error;
  EXPECT_NE(r.error.find("--api-key: bad value '***' for api-key"), std::string::npos) << r.error;
}

TEST(Options, UnknownVariablesAreErrorsOnlyWhenStrict) {
  Toy t;
  const ParsedOptions strict = parse(&t, {}, {{"TOY_COLOR", "red"}});
  EXPECT_NE(strict.error.find("environment TOY_COLOR: unknown option 'color'"), std::string::npos) << strict.error;
  EXPECT_TRUE(parse(&t, {}, {{"TOY_COLOR", "red"}, {"OTHER_PORT", "x"}}, toy_parser(false)).ok);
  const ParsedOptions combined = parse(&t, {"--port", "0"}, {}, toy_parser(true, true));
  EXPECT_NE(combined.error.find("--port: bad option or value: port '0'"), std::string::npos) << combined.error;
}

TEST(Options, HelpListsEveryOptionWithItsDefault) {
  Toy t;
  const std::string help = options_help(toy_parser(), toy_table(&t));
  EXPECT_NE(help.find("--port P"), std::string::npos) << help;
  EXPECT_NE(help.find("TCP port (default 8000)"), std::string::npos) << help;
  EXPECT_NE(help.find("second line (default toy)"), std::string::npos) << help;
  EXPECT_NE(help.find("--fast "), std::string::npos) << help;
  EXPECT_NE(help.find("the secret\n"), std::string::npos) << "default_text \"-\": none shown\n" << help;
  EXPECT_NE(help.find("TOY_CONFIG"), std::string::npos) << help;
  EXPECT_NE(help.find("TOY_PORT"), std::string::npos) << help;
}

TEST(Options, SummaryListsEveryOptionAndMasksSecrets) {
  Toy defaults;
  Toy t;
  EXPECT_EQ(options_summary(toy_table(&t), toy_table(&defaults)), "port=8000 name=toy api_key=(none) fast=no");
  ASSERT_TRUE(parse(&t, {"--api-key", "hunter2", "--fast"}).ok);
  const std::string s = options_summary(toy_table(&t), toy_table(&defaults));
  EXPECT_EQ(s, "port=8000 name=toy api_key=*** fast=yes");
  EXPECT_EQ(option_variable("DELTASERVE_", "max-batch-tokens"), "DELTASERVE_MAX_BATCH_TOKENS");
}

// A choice (value name "a|b|c") names its values in the error line; other options do not.
TEST(Options, BadChoiceErrorsListTheValidOnes) {
  Toy t;
  OptionTable table = toy_table(&t);
  table[1].value_name = "red|green";
  char flag[] = "--name", value[] = "blue";
  char* argv[] = {flag, value};
  table[1].set = [](const std::string& v) { return v == "red" || v == "green"; };
  EXPECT_NE(parse_options(toy_parser(), table, 2, argv, {})
                .error.find("--name: bad value 'blue' for name (valid: red|green)\n"),
            std::string::npos);
  EXPECT_NE(parse_options(toy_parser(true, true), table, 2, argv, {})
                .error.find("--name: bad option or value: name 'blue' (valid: red|green)\n"),
            std::string::npos);
  EXPECT_NE(parse(&t, {"--port", "x"}).error.find("for port\n"), std::string::npos);
}

// The KV cache type flags (common/kv_options.h): -k / -v over the pair, in any layer.
TEST(KvOptions, SidesOverrideThePairInAnyLayer) {
  KvTypeFlags f;
  char a0[] = "--kv-cache-type", a1[] = "q8_0";
  char* argv[] = {a0, a1};
  OptionParser p;
  p.env_prefix = "KV_";
  const ParsedOptions r = parse_options(p, kv_type_option_specs(&f), 2, argv, {{"KV_KV_CACHE_TYPE_V", "bf16"}});
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(f.k_type(), KvType::kQ8_0);
  EXPECT_EQ(f.v_type(), KvType::kBf16);
  EXPECT_EQ(KvTypeFlags{}.k_type(), kDefaultKvType);
  EXPECT_EQ(kv_type_flag(&f, "kv-cache-type-k"), &f.k);
  EXPECT_EQ(kv_type_flag(&f, "kv-cache"), nullptr);
  EXPECT_EQ(kv_type_flag_error("--kv-cache-type", "q5"),
            "--kv-cache-type must be one of f32, bf16, f16, q8_0, fp8, q4r, got 'q5'");
  EXPECT_EQ(kv_types_name(KvType::kQ8_0, KvType::kQ8_0), "q8_0");
  EXPECT_EQ(kv_types_name(KvType::kQ4r, KvType::kF16), "K q4r, V f16");
}

// A type the model's heads cannot be stored as is named with its flag and the heads.
TEST(KvOptions, ProblemsNameTheFlagAndTheHeads) {
  ModelConfig cfg;
  cfg.n_head_kv = 8;
  cfg.head_dim = 96;  // a multiple of 32, not a power of two
  EXPECT_EQ(kv_types_problem(KvType::kQ8_0, KvType::kF16, cfg), "");
  EXPECT_EQ(kv_types_problem(KvType::kQ4r, KvType::kQ4r, cfg),
            "--kv-cache-type q4r: needs a power-of-two head_dim (rotation) (the model's KV rows are 8 heads of 96)");
  EXPECT_EQ(kv_types_problem(KvType::kF32, KvType::kQ4r, cfg).rfind("--kv-cache-type-v q4r: ", 0), 0u);
  cfg.head_dim = 48;
  EXPECT_EQ(kv_types_problem(KvType::kQ8_0, KvType::kF32, cfg)
                .rfind("--kv-cache-type-k q8_0: needs head_dim a multiple of 32", 0),
            0u);
}

// KV bytes per token: K and V rows of every attention layer, as their types store them.
TEST(KvOptions, BytesPerTokenFollowTheTypes) {
  CacheShapes s;
  s.n_attention_layers = 3;
  s.kv_row_floats = 256;  // 2 heads of 128
  EXPECT_EQ(kv_bytes_per_token(s, KvType::kF32, KvType::kF32), 3u * 2 * 1024);
  EXPECT_EQ(kv_bytes_per_token(s, KvType::kQ8_0, KvType::kF16), 3u * (256 + 16 + 512));
  EXPECT_EQ(kv_bytes_per_token(s, KvType::kQ4r, KvType::kFp8), 3u * (128 + 16 + 256));
}

}  // namespace
}  // namespace ds
