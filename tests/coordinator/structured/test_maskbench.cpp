// The MaskBench slice (151 records: every 15th file of the public set, sorted by name, in
// tests/data/structured/maskbench-slice.jsonl.gz). For every schema the compiler accepts, every
// instance — serialized compactly and with ", " / ": " separators, tokenized with the real
// Qwen tokenizer — is walked token by token, the mask agreeing with accept_token at each step:
// valid ones must be accepted to the end and end accepting, invalid ones rejected at some token
// or not accepting at the end. Tolerance: zero wrong verdicts (exact); the accepted-schema
// share must stay >= 70% (the full public set measures ~79%, see deltaserve-bench-grammar).
#include <gtest/gtest.h>
#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "coordinator/structured/json_text.h"
#include "tests/coordinator/structured/structured_test_util.h"
#include "tests/testutil/testutil.h"

namespace ds::structured::test {
namespace {

TEST(MaskBench, SliceVerdictsAreExact) {
  std::ifstream in(ds::test::data_path("structured/maskbench-slice.jsonl"));
  ASSERT_TRUE(in) << "missing test data";
  size_t records = 0, accepted = 0, instances = 0, wrong = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    rapidjson::Document d;
    d.Parse(line.c_str());
    ASSERT_FALSE(d.HasParseError());
    ++records;
    std::shared_ptr<const Grammar> g;
    try {
      g = compile_json_schema(d["schema"]);
    } catch (const SchemaError& e) {
      EXPECT_FALSE(e.keyword.empty());
      continue;
    }
    ++accepted;
    for (const auto& t : d["tests"].GetArray()) {
      const bool valid = t["valid"].GetBool();
      for (bool spaced : {false, true}) {
        const std::string text = json_text(t["data"], spaced);
        ++instances;
        const bool ok = accepts_qwen(g, text);
        if (ok != valid) {
          ++wrong;
          ADD_FAILURE() << d["file"].GetString() << ": " << (valid ? "valid" : "invalid") << " instance got "
                        << (ok ? "accepted" : "rejected") << ": " << text.substr(0, 300);
        }
      }
    }
  }
  std::printf("maskbench slice: %zu/%zu schemas accepted (%.1f%%), %zu instances, %zu wrong verdicts\n", accepted,
              records, 100.0 * static_cast<double>(accepted) / static_cast<double>(records), instances, wrong);
  EXPECT_EQ(records, 151u);
  EXPECT_EQ(wrong, 0u);
  EXPECT_GE(static_cast<double>(accepted), 0.70 * static_cast<double>(records));
}

}  // namespace
}  // namespace ds::structured::test
