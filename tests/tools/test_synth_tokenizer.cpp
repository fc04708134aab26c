// deltaserve-synth's tokenizer keys: copied from another GGUF and padded to the model's
// vocabulary (--tokenizer-from), or the built-in minimal one; both load with our GGUF reader,
// model config and tokenizer, and a copied tokenizer encodes exactly like its source.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "common/error.h"
#include "common/gguf.h"
#include "common/gguf_writer.h"
#include "common/model_config.h"
#include "coordinator/tokenizer/tokenizer.h"
#include "tests/testutil/testutil.h"
#include "tools/synth/generate.h"
#include "tools/synth/shapes.h"
#include "tools/synth/tokenizer_keys.h"

namespace ds::synth {
namespace {

constexpr uint32_t kPaddedVocab = 152064;  // the fixture's 151936 tokens + 128 padding ids

std::string temp_path(const std::string& name) {
  return (std::filesystem::path(testing::TempDir()) / ("synth_tok_" + name + ".gguf")).string();
}

SynthShape tiny_with_vocab(uint32_t n_vocab) {
  SynthShape s = shape_by_name("tiny");
  s.n_vocab = n_vocab;
  return s;
}

std::string write_from_fixture(const std::string& name) {
  const std::string path = temp_path(name);
  write_synth_gguf(tiny_with_vocab(kPaddedVocab), path, 1, 2, test::tiny_model_path());
  return path;
}

// Same type and the same content (scalars, strings, raw array elements or array strings).
void expect_same_value(const std::string& key, const GgufValue& a, const GgufValue& b) {
  ASSERT_EQ(a.type_string(), b.type_string()) << key;
  EXPECT_EQ(a.u64, b.u64) << key;
  EXPECT_EQ(a.i64, b.i64) << key;
  EXPECT_EQ(a.f64, b.f64) << key;
  EXPECT_EQ(a.str, b.str) << key;
  EXPECT_EQ(a.strings, b.strings) << key;
  if (a.is_array() && a.elem_type != GgufType::STRING) {
    for (uint64_t i = 0; i < a.count; ++i)
      ASSERT_EQ(gguf_array_f64(a, i), gguf_array_f64(b, i)) << key << "[" << i << "]";
  }
}

// What llama.cpp's vocabulary loader (src/llama-vocab.cpp) demands of a "gpt2" tokenizer
// beyond our own loader: an array<string> of merges, a token_type array<int32> at least as
// long as the tokens, unique non-empty token texts, and one embedding row per token.
void expect_llama_cpp_vocab_rules(const GgufFile& g) {
  const GgufValue* merges = g.find("tokenizer.ggml.merges");
  ASSERT_NE(merges, nullptr);
  EXPECT_EQ(merges->type_string().rfind("array<string>", 0), 0u);
  const GgufValue* types = g.find("tokenizer.ggml.token_type");
  ASSERT_NE(types, nullptr);
  EXPECT_EQ(types->elem_type, GgufType::INT32);
  const auto& tokens = g.get_string_array("tokenizer.ggml.tokens");
  EXPECT_GE(types->count, tokens.size());
  std::unordered_set<std::string_view> seen;
  for (std::string_view t : tokens) {
    EXPECT_FALSE(t.empty());
    EXPECT_TRUE(seen.insert(t).second) << "duplicate token text '" << t << "'";
  }
  EXPECT_EQ(g.tensor("token_embd.weight").ne[1], tokens.size());
}

// Prompts covering plain text, digits, unicode, whitespace runs and the chat control tokens.
const std::vector<std::string>& sample_texts() {
  static const std::vector<std::string> texts = {
      "Hello world",
      "  leading spaces and\ttabs\n\nnew lines",
      "Numbers 1234567 and 3.14159, punctuation!?",
      "Unicode: caf\xc3\xa9 na\xc3\xafve \xe4\xbd\xa0\xe5\xa5\xbd \xf0\x9f\x98\x80",
      "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n4<|im_end|>",
      "[PAD151990] looks like a padding token but is plain text",
  };
  return texts;
}

TEST(SynthTokenizer, CopiedKeysArePaddedToTheModelVocabulary) {
  const GgufFile src = GgufFile::open(test::tiny_model_path());
  const GgufFile out = GgufFile::open(write_from_fixture("keys"));
  const auto& src_tokens = src.get_string_array("tokenizer.ggml.tokens");
  const auto& tokens = out.get_string_array("tokenizer.ggml.tokens");
  const std::vector<int64_t> src_types = src.get_int_array("tokenizer.ggml.token_type");
  const std::vector<int64_t> types = out.get_int_array("tokenizer.ggml.token_type");
  ASSERT_EQ(src_tokens.size(), 151936u);
  ASSERT_EQ(tokens.size(), kPaddedVocab);
  ASSERT_EQ(types.size(), kPaddedVocab);
  EXPECT_EQ(out.find("tokenizer.ggml.token_type")->elem_type, GgufType::INT32);  // llama.cpp requires int32
  for (size_t i = 0; i < src_tokens.size(); ++i) {
    ASSERT_EQ(tokens[i], src_tokens[i]) << i;
    ASSERT_EQ(types[i], src_types[i]) << i;
  }
  for (size_t i = src_tokens.size(); i < kPaddedVocab; ++i) {
    EXPECT_EQ(tokens[i], pad_token_text(static_cast<uint32_t>(i)));
    EXPECT_EQ(types[i], static_cast<int64_t>(TokenType::UNUSED));
  }
  // Every other tokenizer key (model, pre, merges, special ids, add_bos, chat template) verbatim.
  size_t copied = 0;
  for (const auto& [key, value] : src.metadata()) {
    if (key.rfind("tokenizer.", 0) != 0 || key == "tokenizer.ggml.tokens" || key == "tokenizer.ggml.token_type")
      continue;
    const GgufValue* v = out.find(key);
    ASSERT_NE(v, nullptr) << key;
    expect_same_value(key, value, *v);
    ++copied;
  }
  EXPECT_GE(copied, 7u);  // model, pre, merges, eos, padding, add_bos, chat_template
  EXPECT_TRUE(out.has("tokenizer.chat_template"));
  // The model side agrees with the table: one embedding row per token.
  EXPECT_EQ(load_model_config(out).n_vocab, kPaddedVocab);
  expect_llama_cpp_vocab_rules(out);
}

TEST(SynthTokenizer, CopiedTokenizerEncodesLikeItsSource) {
  const Tokenizer src = Tokenizer::from_file(test::tiny_model_path());
  const Tokenizer out = Tokenizer::from_file(write_from_fixture("encode"));
  EXPECT_EQ(out.n_vocab(), static_cast<int32_t>(kPaddedVocab));
  EXPECT_EQ(out.eos_id(), src.eos_id());
  EXPECT_EQ(out.pad_id(), src.pad_id());
  EXPECT_EQ(out.eog_ids(), src.eog_ids());
  EXPECT_EQ(out.pre_tokenizer(), src.pre_tokenizer());
  for (const std::string& text : sample_texts()) {
    for (bool parse_control : {false, true}) {
      const std::vector<int32_t> ids = src.encode(text, parse_control);
      EXPECT_EQ(out.encode(text, parse_control), ids) << text;
      EXPECT_EQ(out.decode(ids, true), src.decode(ids, true)) << text;
    }
  }
  // Padding ids are hidden like llama.cpp's UNUSED tokens, shown only when rendering control text.
  EXPECT_EQ(out.decode({151990}, false), "");
  EXPECT_EQ(out.decode({151990}, true), "[PAD151990]");
}

TEST(SynthTokenizer, BuiltinTokenizerLoadsAndRoundTripsBytes) {
  const std::string path = temp_path("builtin");
  write_synth_gguf(shape_by_name("tiny"), path, 1, 2);
  const GgufFile g = GgufFile::open(path);
  EXPECT_EQ(g.get_string_array("tokenizer.ggml.tokens").size(), 2048u);
  EXPECT_EQ(g.get_int_array("tokenizer.ggml.token_type").size(), 2048u);
  EXPECT_EQ(g.get_string_array("tokenizer.ggml.merges").size(), 0u);
  EXPECT_FALSE(g.has("tokenizer.chat_template"));
  expect_llama_cpp_vocab_rules(g);
  const Tokenizer t(g);
  EXPECT_EQ(t.n_vocab(), 2048);
  const std::string text = "Hi \xc3\xa9\n";  // no merges: one token per byte, id = byte value
  EXPECT_EQ(t.encode(text, false), (std::vector<int32_t>{'H', 'i', ' ', 0xc3, 0xa9, '\n'}));
  EXPECT_EQ(t.decode(t.encode(text, false), false), text);
  const std::vector<int32_t> chat = t.encode("<|im_start|>a<|im_end|><think>", true);
  EXPECT_EQ(chat, (std::vector<int32_t>{257, 'a', 258, 259}));
  EXPECT_EQ(t.encode("<|im_start|>", false).size(), 12u);  // control text is plain text unless parsed
  EXPECT_EQ(t.eos_id(), 258);
  EXPECT_TRUE(t.is_eog(258));
  EXPECT_TRUE(t.is_eog(256));  // <|endoftext|>
  EXPECT_EQ(t.pad_id(), 256);
  // Filler ids decode to visible words (a random model's output is text) but encoding never
  // produces them: their text is encoded byte by byte.
  EXPECT_EQ(t.token_type(2047), TokenType::NORMAL);
  EXPECT_EQ(t.token_text(2047), builtin_filler_text(2047));
  EXPECT_EQ(t.decode({300, 2047}, false), " tok300 tok2047");
  EXPECT_EQ(t.encode(" tok300", false), (std::vector<int32_t>{' ', 't', 'o', 'k', '3', '0', '0'}));
}

TEST(SynthTokenizer, BuiltinTokenizerNeedsRoomForItsTokens) {
  GgufStreamWriter w;
  EXPECT_THROW(add_builtin_tokenizer(w, kBuiltinTokens - 1), ConfigError);
  EXPECT_NO_THROW(add_builtin_tokenizer(w, kBuiltinTokens));
}

TEST(SynthTokenizer, MissingSourceFileFailsAndWritesNothing) {
  const std::string path = temp_path("missing_src");
  std::filesystem::remove(path);
  EXPECT_THROW(write_synth_gguf(tiny_with_vocab(kPaddedVocab), path, 1, 2, "/nonexistent/model.gguf"), FormatError);
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST(SynthTokenizer, SourceWithoutTokenizerIsRejected) {
  GgufWriter w;
  w.add_string("general.architecture", "qwen35");
  const std::string src = temp_path("no_tokenizer_src");
  w.write(src);
  const std::string path = temp_path("no_tokenizer");
  std::filesystem::remove(path);
  try {
    write_synth_gguf(tiny_with_vocab(kPaddedVocab), path, 1, 2, src);
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("has no tokenizer"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST(SynthTokenizer, SourceVocabularyLargerThanTheModelIsRejected) {
  const std::string path = temp_path("too_small");
  std::filesystem::remove(path);
  try {
    write_synth_gguf(shape_by_name("tiny"), path, 1, 2, test::tiny_model_path());  // 151936 > 2048
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("more than the model's vocabulary of 2048"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST(SynthTokenizer, SourceTokenNamedLikeAPaddingTokenIsRejected) {
  GgufWriter w;  // llama.cpp refuses duplicate token texts, so the collision must not be written
  w.add_string("tokenizer.ggml.model", "gpt2");
  w.add_string_array("tokenizer.ggml.tokens", {"a", "[PAD3]"});
  w.add_string_array("tokenizer.ggml.merges", {});
  const std::string src = temp_path("collision_src");
  w.write(src);
  GgufStreamWriter out;
  EXPECT_THROW(add_tokenizer_from(out, GgufFile::open(src), 4), ConfigError);
  GgufStreamWriter fits;  // no padding needed: nothing can collide
  EXPECT_NO_THROW(add_tokenizer_from(fits, GgufFile::open(src), 2));
}

TEST(SynthTokenizer, SourceWithoutByteLevelBpeIsRejected) {
  GgufWriter w;  // a SentencePiece vocabulary: llama.cpp could load it, deltaserve could not serve it
  w.add_string("tokenizer.ggml.model", "llama");
  w.add_string_array("tokenizer.ggml.tokens", {"<unk>", "a"});
  const std::string src = temp_path("spm_src");
  w.write(src);
  GgufStreamWriter out;
  try {
    add_tokenizer_from(out, GgufFile::open(src), 4);
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer.ggml.model 'llama' is not a byte-level BPE"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace ds::synth
