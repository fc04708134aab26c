// GGUF reader: every value type, typed-accessor errors, and hostile inputs (every truncation
// of the fixture header, random byte flips) that must produce FormatError, never a crash.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "common/error.h"
#include "common/gguf.h"
#include "common/gguf_writer.h"
#include "tests/testutil/testutil.h"

namespace ds {
namespace {

std::vector<uint8_t> small_file() {
  GgufWriter w;
  w.add_string("general.architecture", "qwen35");
  w.add_u32("a.u32", 7);
  w.add_i32("a.i32", -3);
  w.add_u64("a.u64", uint64_t{1} << 40);
  w.add_f32("a.f32", 1.5f);
  w.add_bool("a.bool", true);
  w.add_string_array("a.strs", {"x", "", "hello world"});
  w.add_i32_array("a.ints", {11, 11, 10, 0});
  w.add_f32_array("a.floats", {0.5f, -2.0f});
  std::vector<uint8_t> data(4 * 8);
  for (int i = 0; i < 8; ++i) {
    float v = static_cast<float>(i);
    std::memcpy(data.data() + 4 * i, &v, 4);
  }
  w.add_tensor("t.weight", GgmlType::F32, {4, 2}, data);
  return w.serialize();
}

TEST(Gguf, ReadsEveryValueType) {
  GgufFile g = GgufFile::from_bytes(small_file());
  EXPECT_EQ(g.version(), 3u);
  EXPECT_EQ(g.get_string("general.architecture"), "qwen35");
  EXPECT_EQ(g.get_u32("a.u32"), 7u);
  EXPECT_EQ(g.get_i64("a.i32"), -3);
  EXPECT_EQ(g.get_u64("a.u64"), uint64_t{1} << 40);
  EXPECT_FLOAT_EQ(g.get_f32("a.f32"), 1.5f);
  EXPECT_TRUE(g.get_bool("a.bool"));
  const auto& strs = g.get_string_array("a.strs");
  ASSERT_EQ(strs.size(), 3u);
  EXPECT_EQ(strs[2], "hello world");
  EXPECT_EQ(strs[1], "");
  EXPECT_EQ(g.get_int_array("a.ints"), (std::vector<int64_t>{11, 11, 10, 0}));
  EXPECT_EQ(g.get_f32_array("a.floats"), (std::vector<float>{0.5f, -2.0f}));
  EXPECT_EQ(g.get_u32_or("missing", 42), 42u);
  const GgufTensor& t = g.tensor("t.weight");
  EXPECT_EQ(t.ne[0], 4u);
  EXPECT_EQ(t.ne[1], 2u);
  EXPECT_EQ(t.nbytes, 32u);
  float v7;
  std::memcpy(&v7, t.data + 28, 4);
  EXPECT_EQ(v7, 7.0f);
}

TEST(Gguf, TypedAccessorErrorsNameKeyAndType) {
  GgufFile g = GgufFile::from_bytes(small_file());
  try {
    g.get_u32("general.architecture");
    FAIL() << "expected FormatError";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("general.architecture"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("expected uint32"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("string"), std::string::npos) << e.what();
  }
  EXPECT_THROW(g.get_u32("a.i32"), FormatError);  // negative does not fit uint32
  EXPECT_THROW(g.get_u32("a.u64"), FormatError);  // too large for uint32
  EXPECT_THROW(g.get_string("missing.key"), FormatError);
  EXPECT_THROW(g.get_string_array("a.ints"), FormatError);
  EXPECT_THROW(g.get_bool("a.u32"), FormatError);
  EXPECT_THROW(g.tensor("nope"), ConfigError);
}

TEST(Gguf, CustomAlignmentIsHonoured) {
  GgufWriter w;
  w.set_alignment(64);
  w.add_tensor("a", GgmlType::F32, {3}, std::vector<uint8_t>(12, 1));
  w.add_tensor("b", GgmlType::F32, {5}, std::vector<uint8_t>(20, 2));
  GgufFile g = GgufFile::from_bytes(w.serialize());
  EXPECT_EQ(g.alignment(), 64u);
  EXPECT_EQ(g.data_offset() % 64, 0u);
  EXPECT_EQ(g.tensor("b").offset, 64u);
  EXPECT_EQ(g.tensor("b").data[0], 2);
}

TEST(Gguf, RejectsBadMagicVersionAndAlignment) {
  std::vector<uint8_t> f = small_file();
  auto bad = f;
  bad[0] = 'X';
  EXPECT_THROW(GgufFile::from_bytes(bad), FormatError);
  bad = f;
  bad[4] = 2;
  EXPECT_THROW(GgufFile::from_bytes(bad), FormatError);
  GgufWriter w;
  w.add_u32("general.alignment", 48);  // not a power of two
  EXPECT_THROW(GgufFile::from_bytes(w.serialize()), FormatError);
}

TEST(Gguf, RejectsOutOfBoundsTensor) {
  GgufWriter w;
  w.add_tensor("t", GgmlType::F32, {8}, std::vector<uint8_t>(32, 0));
  std::vector<uint8_t> f = w.serialize();
  f.resize(f.size() - 4);  // data section now too short
  try {
    GgufFile::from_bytes(f);
    FAIL();
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("'t'"), std::string::npos) << e.what();
  }
}

TEST(Gguf, RejectsHugeCountsWithoutAllocating) {
  std::vector<uint8_t> f = {'G', 'G', 'U', 'F', 3, 0, 0, 0};
  const uint64_t huge = ~uint64_t{0} >> 1;
  for (int i = 0; i < 2; ++i) {
    const size_t at = f.size();
    f.resize(at + 8);
    std::memcpy(f.data() + at, &huge, 8);
  }
  EXPECT_THROW(GgufFile::from_bytes(f), FormatError);
}

// The fixture's header with its tokenizer arrays shortened to a few entries: same structure
// (every value type the real file uses, all 123 tensor infos) but small enough that every
// single truncation can be tried.
std::vector<uint8_t> reduced_fixture_header(const GgufFile& full) {
  GgufWriter w;
  for (const auto& [k, v] : full.metadata()) {
    if (v.type == GgufType::UINT32)
      w.add_u32(k, static_cast<uint32_t>(v.u64));
    else if (v.type == GgufType::INT32)
      w.add_i32(k, static_cast<int32_t>(v.i64));
    else if (v.type == GgufType::FLOAT32)
      w.add_f32(k, static_cast<float>(v.f64));
    else if (v.type == GgufType::BOOL)
      w.add_bool(k, v.u64 != 0);
    else if (v.type == GgufType::STRING)
      w.add_string(k, std::string(v.str));
    else if (v.is_array() && v.elem_type == GgufType::STRING) {
      std::vector<std::string> few;
      for (size_t i = 0; i < v.strings.size() && i < 16; ++i) few.emplace_back(v.strings[i]);
      w.add_string_array(k, few);
    } else if (v.is_array()) {
      std::vector<int32_t> few;
      for (uint64_t i = 0; i < v.count && i < 16; ++i) few.push_back(static_cast<int32_t>(gguf_array_i64(v, i)));
      w.add_i32_array(k, few);
    }
  }
  for (const auto& t : full.tensors()) {
    std::vector<uint64_t> ne(t.ne.begin(), t.ne.begin() + t.n_dims);
    w.add_tensor(t.name, t.type, ne, std::vector<uint8_t>(t.nbytes, 0));
  }
  std::vector<uint8_t> bytes = w.serialize();
  bytes.resize(static_cast<size_t>(GgufFile::from_view(bytes.data(), bytes.size()).data_offset()));
  return bytes;
}

size_t count_rejected_prefixes(const std::vector<uint8_t>& bytes, size_t from, size_t to) {
  size_t failures = 0;
  for (size_t n = from; n < to; ++n) {
    try {
      GgufFile::from_view(bytes.data(), n);
    } catch (const FormatError&) {
      ++failures;
    }
  }
  return failures;
}

// Every truncation of the (reduced) fixture header must fail cleanly: tensors point past it.
TEST(Gguf, EveryTruncationOfTheFixtureHeaderFailsCleanly) {
  const GgufFile full = GgufFile::open(test::tiny_model_path());
  const std::vector<uint8_t> header = reduced_fixture_header(full);
  ASSERT_GT(header.size(), 4000u);
  EXPECT_EQ(count_rejected_prefixes(header, 0, header.size() + 1), header.size() + 1);
}

// On the real header (megabytes of vocabulary; one parse costs milliseconds) try every
// truncation of its first 16 KiB (magic, counts, first strings), of its last 1 KiB (the end
// of the tensor table) and 300 random points. The reduced header above covers the rest.
TEST(Gguf, TruncationsOfTheRealHeaderFailCleanly) {
  const std::vector<uint8_t> bytes = test::read_file(test::tiny_model_path());
  const GgufFile full = GgufFile::from_view(bytes.data(), bytes.size());
  const size_t header = static_cast<size_t>(full.data_offset());
  EXPECT_EQ(count_rejected_prefixes(bytes, 0, 16384), 16384u);
  EXPECT_EQ(count_rejected_prefixes(bytes, header - 1024, header + 1), 1025u);
  std::mt19937 rng(7);
  size_t failures = 0;
  for (int i = 0; i < 300; ++i) {
    const size_t n = rng() % header;
    failures += count_rejected_prefixes(bytes, n, n + 1);
  }
  EXPECT_EQ(failures, 300u);
}

TEST(Gguf, RandomByteFlipsNeverCrash) {
  std::vector<uint8_t> bytes = test::read_file(test::tiny_model_path());
  const GgufFile full = GgufFile::from_bytes(bytes);
  const size_t header = static_cast<size_t>(full.data_offset());
  std::mt19937 rng(1234);
  int parsed = 0, rejected = 0;
  for (int iter = 0; iter < 300; ++iter) {
    std::vector<uint8_t> mutated(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(header + 4096));
    const int flips = 1 + static_cast<int>(rng() % 8);
    for (int k = 0; k < flips; ++k) mutated[rng() % header] ^= static_cast<uint8_t>(1u << (rng() % 8));
    try {
      GgufFile g = GgufFile::from_bytes(std::move(mutated));
      for (const auto& t : g.tensors()) ASSERT_LE(t.offset + t.nbytes + g.data_offset(), g.file_size());
      ++parsed;
    } catch (const FormatError&) {
      ++rejected;
    }
  }
  EXPECT_EQ(parsed + rejected, 300);
  EXPECT_GT(rejected, 0);
}

TEST(Gguf, FixtureHas123Tensors) {
  GgufFile g = GgufFile::open(test::tiny_model_path());
  EXPECT_EQ(g.tensors().size(), 123u);
  EXPECT_EQ(g.get_string("general.architecture"), "qwen35");
  EXPECT_EQ(g.get_string("tokenizer.ggml.pre"), "qwen2");
  EXPECT_EQ(g.get_string_array("tokenizer.ggml.tokens").size(), 151936u);
}

TEST(Gguf, MissingFileNamesThePath) {
  try {
    GgufFile::open("/nonexistent/model.gguf");
    FAIL();
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/model.gguf"), std::string::npos);
  }
}

}  // namespace
}  // namespace ds
