// Loading from hand-built GGUFs: errors that name the key, and BPE on a tiny vocabulary.
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "common/error.h"
#include "common/gguf.h"
#include "common/gguf_writer.h"
#include "coordinator/tokenizer/byte_level.h"
#include "coordinator/tokenizer/tokenizer.h"

namespace ds::test {
namespace {

// Ids 0..255: the byte tokens in byte order; then `extra` (type NORMAL unless listed).
struct VocabSpec {
  std::string model = "gpt2";
  std::string pre = "qwen35";
  std::vector<std::string> extra;          // raw (unmapped) texts
  std::vector<int32_t> extra_types;        // parallel to extra; empty = all NORMAL
  std::vector<std::string> merges;         // raw "a b" pairs (mapped on write)
  std::function<void(GgufWriter&)> tweak;  // extra keys
  bool write_merges = true;
  bool write_pre = true;
};

std::string mapped_merge(const std::string& raw) {
  const size_t sp = raw.find(' ', 1);
  return tok::map_bytes(raw.substr(0, sp)) + " " + tok::map_bytes(raw.substr(sp + 1));
}

GgufFile build(const VocabSpec& s) {
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  for (int b = 0; b < 256; ++b) {
    tokens.push_back(tok::map_bytes(std::string(1, static_cast<char>(b))));
    types.push_back(1);
  }
  for (size_t i = 0; i < s.extra.size(); ++i) {
    const int32_t t = s.extra_types.empty() ? 1 : s.extra_types[i];
    tokens.push_back(t == 1 ? tok::map_bytes(s.extra[i]) : s.extra[i]);
    types.push_back(t);
  }
  std::vector<std::string> merges;
  for (const std::string& m : s.merges) merges.push_back(mapped_merge(m));
  GgufWriter w;
  w.add_string("general.architecture", "qwen35");
  w.add_string("tokenizer.ggml.model", s.model);
  if (s.write_pre) w.add_string("tokenizer.ggml.pre", s.pre);
  w.add_string_array("tokenizer.ggml.tokens", tokens);
  w.add_i32_array("tokenizer.ggml.token_type", types);
  if (s.write_merges) w.add_string_array("tokenizer.ggml.merges", merges);
  if (s.tweak) s.tweak(w);
  return GgufFile::from_bytes(w.serialize());
}

// Expects ConfigError whose message contains every one of `needles`.
void expect_config_error(const VocabSpec& s, std::initializer_list<const char*> needles) {
  try {
    Tokenizer t(build(s));
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& e) {
    for (const char* n : needles) EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << e.what();
  }
}

TEST(TokenizerLoad, UnknownPreTokenizer) {
  VocabSpec s;
  s.pre = "llama-bpe";
  expect_config_error(s, {"tokenizer.ggml.pre", "llama-bpe"});
}

TEST(TokenizerLoad, MissingPreTokenizer) {
  VocabSpec s;
  s.write_pre = false;
  expect_config_error(s, {"tokenizer.ggml.pre"});
}

TEST(TokenizerLoad, ForcedPreTokenizerOverridesTheFile) {
  VocabSpec s;
  s.pre = "something-else";
  TokenizerOptions o;
  o.pre_tokenizer = PreTokenizerKind::QWEN2;
  EXPECT_EQ(Tokenizer(build(s), o).pre_tokenizer(), PreTokenizerKind::QWEN2);
}

TEST(TokenizerLoad, UnsupportedModel) {
  VocabSpec s;
  s.model = "llama";
  expect_config_error(s, {"tokenizer.ggml.model", "llama"});
}

TEST(TokenizerLoad, TokenTypeCountMismatch) {
  GgufWriter w;
  w.add_string("tokenizer.ggml.model", "gpt2");
  w.add_string("tokenizer.ggml.pre", "qwen2");
  w.add_string_array("tokenizer.ggml.tokens", {"a", "b", "c"});
  w.add_i32_array("tokenizer.ggml.token_type", {1, 1});
  w.add_string_array("tokenizer.ggml.merges", {});
  try {
    Tokenizer t(GgufFile::from_bytes(w.serialize()));
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer.ggml.token_type"), std::string::npos) << e.what();
  }
}

TEST(TokenizerLoad, EosOutsideVocabulary) {
  VocabSpec s;
  s.tweak = [](GgufWriter& w) { w.add_u32("tokenizer.ggml.eos_token_id", 99999); };
  expect_config_error(s, {"tokenizer.ggml.eos_token_id", "99999"});
}

TEST(TokenizerLoad, MergeWithoutSpace) {
  VocabSpec s;
  s.write_merges = false;
  s.tweak = [](GgufWriter& w) { w.add_string_array("tokenizer.ggml.merges", {"ab"}); };
  expect_config_error(s, {"tokenizer.ggml.merges[0]"});
}

TEST(TokenizerLoad, MissingMergesIsAFormatError) {
  VocabSpec s;
  s.write_merges = false;
  EXPECT_THROW(Tokenizer(build(s)), FormatError);
}

TEST(TokenizerTinyVocab, MergesApplyByRank) {
  VocabSpec s;
  s.extra = {"ab", "bc", "abc"};  // ids 256, 257, 258
  s.merges = {"b c", "a b", "ab c"};
  const Tokenizer t(build(s));
  EXPECT_EQ(t.encode("abc", false), (std::vector<int32_t>{'a', 257}));  // "b c" outranks "a b"
  EXPECT_EQ(t.encode("ab", false), (std::vector<int32_t>{256}));
  EXPECT_EQ(t.eos_id(), -1);
  EXPECT_TRUE(t.eog_ids().empty());
}

TEST(TokenizerTinyVocab, EqualRankMergesApplyLeftToRight) {
  VocabSpec s;
  s.extra = {"aa"};  // id 256
  s.merges = {"a a"};
  const Tokenizer t(build(s));
  EXPECT_EQ(t.encode("aaa", false), (std::vector<int32_t>{256, 'a'}));
  EXPECT_EQ(t.encode("aaaa", false), (std::vector<int32_t>{256, 256}));
}

TEST(TokenizerTinyVocab, IntermediateMissingFromVocabFallsBackToBytes) {
  VocabSpec s;
  s.extra = {"xyz"};  // id 256; "xy" is only a merge intermediate
  s.merges = {"x y", "xy z"};
  const Tokenizer t(build(s));
  EXPECT_EQ(t.encode("xyz", false), (std::vector<int32_t>{256}));
  EXPECT_EQ(t.encode("xy", false), (std::vector<int32_t>{'x', 'y'}));
}

TEST(TokenizerTinyVocab, AddedTokensLongestFirst) {
  VocabSpec s;
  s.extra = {"qr", "rst", "<c>"};  // ids 256, 257 USER_DEFINED, 258 CONTROL
  s.extra_types = {4, 4, 3};
  const Tokenizer t(build(s));
  // Longest first over the whole text: "rst" wins although "qr" starts earlier.
  EXPECT_EQ(t.encode("qrst", false), (std::vector<int32_t>{'q', 257}));
  EXPECT_EQ(t.encode("qr<c>", true), (std::vector<int32_t>{256, 258}));
  EXPECT_EQ(t.encode("<c>", false), (std::vector<int32_t>{'<', 'c', '>'}));
}

}  // namespace
}  // namespace ds::test
