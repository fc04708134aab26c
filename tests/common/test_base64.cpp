// Strict standard base64 (common/base64.h).
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "common/base64.h"

namespace ds {
namespace {

std::vector<uint8_t> bytes_of(const std::string& s) {
  return {s.begin(), s.end()};
}

std::string decoded_text(std::string_view b64) {
  std::string error;
  const auto bytes = base64_decode(b64, SIZE_MAX, &error);
  if (!bytes) return "error: " + error;
  return {bytes->begin(), bytes->end()};
}

// RFC 4648 §10's test vectors.
TEST(Base64, EncodesAndDecodesTheRfcVectors) {
  const std::pair<std::string, std::string> vectors[] = {{"", ""},
                                                         {"f", "Zg=="},
                                                         {"fo", "Zm8="},
                                                         {"foo", "Zm9v"},
                                                         {"foob", "Zm9vYg=="},
                                                         {"fooba", "Zm9vYmE="},
                                                         {"foobar", "Zm9vYmFy"}};
  for (const auto& [plain, encoded] : vectors) {
    EXPECT_EQ(base64_encode(bytes_of(plain)), encoded);
    EXPECT_EQ(decoded_text(encoded), plain);
  }
}

TEST(Base64, RoundTripsEveryLengthAndByte) {
  std::mt19937 rng(5);
  for (size_t n = 0; n < 70; ++n) {
    std::vector<uint8_t> data(n);
    for (uint8_t& b : data) b = static_cast<uint8_t>(rng());
    const auto back = base64_decode(base64_encode(data));
    ASSERT_TRUE(back.has_value()) << n;
    EXPECT_EQ(*back, data) << n;
  }
}

TEST(Base64, SkipsWhitespaceAndAcceptsMissingPadding) {
  EXPECT_EQ(decoded_text("Zm9v\r\nYmFy\n"), "foobar");
  EXPECT_EQ(decoded_text(" Zm 9v\tYg = = "), "foob");
  EXPECT_EQ(decoded_text("Zm9vYg"), "foob");
  EXPECT_EQ(decoded_text("Zm9vYmE"), "fooba");
}

TEST(Base64, RefusesCharactersOutsideTheAlphabet) {
  EXPECT_EQ(decoded_text("Zm9v*mFy"), "error: invalid base64 character 0x2a '*' at offset 4");
  EXPECT_NE(decoded_text("Zm9v_mFy").find("invalid base64 character"), std::string::npos);  // URL-safe '_'
  EXPECT_NE(decoded_text(std::string("Zm9v\0mFy", 8)).find("0x00"), std::string::npos);
}

TEST(Base64, RefusesMisplacedOrIncompletePadding) {
  for (const char* bad : {"=Zg=", "Z===", "Zg=a", "Zg==Zg==", "Zm9vY", "Zg=", "Zm9=="}) {
    EXPECT_EQ(decoded_text(bad).rfind("error: ", 0), 0u) << bad << " -> " << decoded_text(bad);
  }
}

TEST(Base64, StopsAtTheSizeCap) {
  std::string error;
  EXPECT_TRUE(base64_decode("Zm9vYmFy", 6).has_value());
  EXPECT_FALSE(base64_decode("Zm9vYmFy", 5, &error).has_value());
  EXPECT_NE(error.find("exceeds 5 bytes"), std::string::npos) << error;
  EXPECT_FALSE(base64_decode("Zm9vYg", 3).has_value());
}

}  // namespace
}  // namespace ds
