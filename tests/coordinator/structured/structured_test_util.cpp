#include "tests/coordinator/structured/structured_test_util.h"

#include <gtest/gtest.h>
#include <rapidjson/document.h>

#include "common/gguf.h"
#include "tests/testutil/testutil.h"

namespace ds::structured::test {

std::shared_ptr<const TokenVocab> byte_vocab() {
  static std::shared_ptr<const TokenVocab> v = [] {
    std::vector<std::string> t;
    for (int b = 0; b < 256; ++b) t.emplace_back(1, static_cast<char>(b));
    for (const char* s : {"{\"", "\":", "\",\"", "\"}", "true", "null", "  ", "\n  ", "12", "\xC3", "\xA9\"", "é"})
      t.emplace_back(s);
    t.emplace_back();  // EOS: no bytes
    const int32_t eos = static_cast<int32_t>(t.size() - 1);
    return std::make_shared<const TokenVocab>(std::move(t), std::vector<int32_t>{eos});
  }();
  return v;
}

int32_t byte_vocab_eos() {
  return byte_vocab()->n_vocab() - 1;
}

const ds::Tokenizer& qwen_tokenizer() {
  static const ds::Tokenizer tok(ds::GgufFile::open(ds::test::tiny_model_path()));
  return tok;
}

std::shared_ptr<const TokenVocab> qwen_vocab() {
  static std::shared_ptr<const TokenVocab> v = std::make_shared<const TokenVocab>(from_tokenizer(qwen_tokenizer()));
  return v;
}

std::shared_ptr<const Grammar> schema(const std::string& json, const GrammarOptions& opt) {
  rapidjson::Document d;
  d.Parse(json.c_str());
  if (d.HasParseError()) throw std::runtime_error("bad test schema: " + json);
  return compile_json_schema(d, opt);
}

bool accepts_bytes(const std::shared_ptr<const Grammar>& g, const std::string& text) {
  Matcher m(g, byte_vocab());
  for (char c : text)
    if (!m.accept_bytes(std::string_view(&c, 1))) return false;
  return m.accepting();
}

bool accepts_tokens(const std::shared_ptr<const Grammar>& g, const std::shared_ptr<const TokenVocab>& v,
                    const std::vector<int32_t>& ids) {
  Matcher m(g, v);
  std::vector<uint32_t> mask(v->n_words());
  for (int32_t id : ids) {
    m.fill_mask(mask.data());
    const bool allowed = bit(mask, id);
    const bool ok = m.accept_token(id);
    EXPECT_EQ(allowed, ok) << "mask disagrees with accept_token for token " << id << " (" << v->token_bytes(id) << ")";
    if (!ok) return false;
  }
  m.fill_mask(mask.data());
  for (int32_t e : v->eog_ids()) EXPECT_EQ(bit(mask, e), m.accepting());
  return m.accepting();
}

bool accepts_qwen(const std::shared_ptr<const Grammar>& g, const std::string& text) {
  return accepts_tokens(g, qwen_vocab(), qwen_tokenizer().encode(text, false));
}

}  // namespace ds::structured::test
