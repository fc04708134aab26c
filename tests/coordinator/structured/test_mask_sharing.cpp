// Masks against a brute-force oracle (every token tried with accept_token + rollback), so that
// the shortcuts of mask computation (string slice bitsets, cached entries) cannot allow or forbid
// a token the matcher itself would not; and matchers of several sequences sharing one Grammar
// and one TokenVocab on 4 threads, compared with the single-threaded run (exact).
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "tests/coordinator/structured/structured_test_util.h"

namespace ds::structured::test {
namespace {

// Bounded strings, a pattern, an enum, numbers, nested objects and arrays: the lexeme kinds
// whose masks take different paths.
const char* kSchema = R"({"type": "object", "properties": {
  "name": {"type": "string", "maxLength": 6},
  "code": {"type": "string", "pattern": "^[A-Z]{2}-[0-9]+$"},
  "kind": {"enum": ["alpha", "beta", "gamma delta"]},
  "n": {"type": "integer", "minimum": -5, "maximum": 300},
  "x": {"type": "number"},
  "tags": {"type": "array", "items": {"type": "string", "minLength": 2}},
  "sub": {"type": "object", "properties": {"a": {"type": "boolean"}}, "required": ["a"]}},
  "required": ["name", "kind"]})";

const std::vector<std::string>& instances() {
  static const std::vector<std::string> v = {
      R"({"name": "abc", "kind": "beta", "n": 17, "tags": ["xy", "héllo wörld"]})",
      R"({"kind":"gamma delta","name":"ab\"c","code":"QX-123","x":-1.5e3})",
      R"({"name": "日本語", "kind": "alpha", "sub": {"a": true}, "other": [1, {"k": null}]})",
      R"({"name":"","kind":"alpha","n":300,"tags":[]})",
  };
  return v;
}

uint64_t hash_words(const std::vector<uint32_t>& m) {
  uint64_t h = 1469598103934665603ull;
  for (uint32_t w : m) h = (h ^ w) * 1099511628211ull;
  return h;
}

// Per step: the mask's hash and whether the instance's token was accepted.
std::vector<std::pair<uint64_t, bool>> trace(const std::shared_ptr<const Grammar>& g,
                                             const std::shared_ptr<const TokenVocab>& v, const std::string& text) {
  Matcher m(g, v);
  std::vector<uint32_t> mask(v->n_words());
  std::vector<std::pair<uint64_t, bool>> out;
  for (int32_t id : qwen_tokenizer().encode(text, false)) {
    m.fill_mask(mask.data());
    const bool ok = m.accept_token(id);
    out.emplace_back(hash_words(mask), ok);
    if (!ok) break;
    // Rollback and redo: the history must restore the same configuration.
    m.rollback(1);
    EXPECT_TRUE(m.accept_token(id));
  }
  m.fill_mask(mask.data());
  out.emplace_back(hash_words(mask), m.accepting());
  return out;
}

TEST(MaskSharing, MasksMatchBruteForceAtEveryPosition) {
  const auto g = schema(kSchema);
  const auto v = qwen_vocab();
  const std::string text = R"({"name": "a\"é", "code": "AB-1", "kind": "gamma delta", "n": -5, "x": 2.5})";
  Matcher m(g, v);
  std::vector<uint32_t> mask(v->n_words());
  size_t positions = 0;
  const auto ids = qwen_tokenizer().encode(text, false);
  for (size_t i = 0; i < ids.size(); ++i) {
    // Every other position keeps the test fast; both inside strings and between members.
    if (i % 2 == 0) {
      m.fill_mask(mask.data());
      for (int32_t t = 0; t < v->n_vocab(); ++t) {
        const bool ok = m.accept_token(t);
        if (ok) m.rollback(1);
        ASSERT_EQ(bit(mask, t), ok) << "position " << i << " token " << t << " '" << v->token_bytes(t) << "'";
      }
      ++positions;
    }
    ASSERT_TRUE(m.accept_token(ids[i])) << "position " << i;
  }
  EXPECT_TRUE(m.accepting());
  EXPECT_GT(positions, 5u);
}

TEST(MaskSharing, ConcurrentMatchersAgreeWithSingleThreaded) {
  const auto v = qwen_vocab();
  std::vector<std::vector<std::pair<uint64_t, bool>>> want;
  {
    const auto g = schema(kSchema);
    for (const auto& s : instances()) want.push_back(trace(g, v, s));
  }
  // A fresh grammar (cold mask cache) and a fresh vocabulary (cold lexeme cache), shared by all
  // the threads: they race to fill both caches.
  const auto g = schema(kSchema);
  std::vector<std::string> bytes;
  for (int32_t i = 0; i < v->n_vocab(); ++i) bytes.push_back(v->token_bytes(i));
  const auto v2 = std::make_shared<const TokenVocab>(std::move(bytes), v->eog_ids());
  constexpr int kThreads = 4;
  std::vector<std::vector<std::vector<std::pair<uint64_t, bool>>>> got(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      const size_t n = instances().size();
      got[t].resize(n);
      for (size_t k = 0; k < n; ++k) {
        const size_t i = (k + static_cast<size_t>(t)) % n;  // different orders per thread
        got[t][i] = trace(g, v2, instances()[i]);
      }
    });
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t)
    for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(got[t][i], want[i]) << "thread " << t << " instance " << i;
  EXPECT_TRUE(want[0].back().second);
}

// not {} forbids a property; not {type: ...} removes types (also merged through allOf).
TEST(MaskSharing, SimpleNotFormsAreExact) {
  const auto forbid = schema(R"({"type":"object","properties":{"secret":{"not":{}}}})");
  EXPECT_TRUE(accepts_bytes(forbid, R"({"a":1})"));
  EXPECT_FALSE(accepts_bytes(forbid, R"({"secret":1})"));
  const auto no_str = schema(R"({"allOf":[{"not":{"type":"string"}},{"not":{"type":["null","array"]}}]})");
  EXPECT_TRUE(accepts_bytes(no_str, "12"));
  EXPECT_TRUE(accepts_bytes(no_str, "{}"));
  EXPECT_FALSE(accepts_bytes(no_str, "\"x\""));
  EXPECT_FALSE(accepts_bytes(no_str, "null"));
  EXPECT_FALSE(accepts_bytes(no_str, "[]"));
  const auto no_num = schema(R"({"type":["integer","boolean"],"not":{"type":"number"}})");
  EXPECT_TRUE(accepts_bytes(no_num, "true"));
  EXPECT_FALSE(accepts_bytes(no_num, "3"));
}

}  // namespace
}  // namespace ds::structured::test
