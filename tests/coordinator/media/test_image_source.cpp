// load_image_bytes (coordinator/media/image_source.h): data: URLs, bare base64, file:// under a
// media root, and the refusals, each a MediaError a client can act on.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/base64.h"
#include "coordinator/media/image_source.h"
#include "tests/coordinator/media/vl_fixture.h"

namespace ds {
namespace {

namespace fs = std::filesystem;

std::string load_error(const std::string& url, const ImageSourceOptions& options = {}) {
  try {
    load_image_bytes(url, options);
  } catch (const MediaError& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

std::string png_base64() {
  return base64_encode(test::fixture_file("png"));
}

TEST(ImageSource, DataUrlGivesTheImageBytes) {
  EXPECT_EQ(load_image_bytes("data:image/png;base64," + png_base64()), test::fixture_file("png"));
  // Parameters before ;base64 and upper-case MIME types are fine.
  EXPECT_EQ(load_image_bytes("data:IMAGE/PNG;name=x.png;base64," + png_base64()), test::fixture_file("png"));
}

// The declared type is not checked against the data: the decoder goes by the data's own bytes.
TEST(ImageSource, MismatchedImageMimeDecodesByTheData) {
  const std::string url = "data:image/png;base64," + base64_encode(test::fixture_file("jpeg"));
  const RgbImage im = load_image(url);
  EXPECT_EQ(im.width, 288u);
  EXPECT_EQ(im.height, 256u);
}

TEST(ImageSource, NonImageOrMissingMimeIsRefused) {
  const std::string text = load_error("data:text/plain;base64," + png_base64());
  EXPECT_TRUE(contains(text, "'text/plain', not an image type")) << text;
  EXPECT_TRUE(contains(load_error("data:;base64," + png_base64()), "names no MIME type"));
  EXPECT_TRUE(contains(load_error("data:image/;base64,AAAA"), "not an image type"));
  EXPECT_TRUE(contains(load_error("data:image/png," + png_base64()), "only base64 data: URLs"));
  EXPECT_TRUE(contains(load_error("data:image/png;base64"), "no ','"));
}

TEST(ImageSource, BareBase64IsAcceptedAndWrappedLinesToo) {
  EXPECT_EQ(load_image_bytes(png_base64()), test::fixture_file("png"));
  std::string wrapped = png_base64();
  for (size_t at = 76; at < wrapped.size(); at += 78) wrapped.insert(at, "\r\n");
  EXPECT_EQ(load_image_bytes("data:image/png;base64," + wrapped), test::fixture_file("png"));
}

TEST(ImageSource, InvalidBase64IsRefused) {
  const std::string error = load_error("data:image/png;base64,iVBO*RK");
  EXPECT_TRUE(contains(error, "not valid base64: invalid base64 character 0x2a '*'")) << error;
  EXPECT_TRUE(contains(load_error("iVBORw0KGgo$"), "the base64 image is not valid base64"));
  EXPECT_TRUE(contains(load_error("data:image/png;base64,"), "is empty"));
  EXPECT_TRUE(contains(load_error("data:image/png;base64,   "), "is empty"));
}

TEST(ImageSource, OversizedImagesAreRefused) {
  ImageSourceOptions small;
  small.max_image_bytes = 1000;
  EXPECT_TRUE(contains(load_error("data:image/png;base64," + png_base64(), small), "the image limit of 1000 bytes"));
  // Just past the cap after decoding, though the text alone passes the cheap check.
  EXPECT_TRUE(contains(load_error(base64_encode(std::vector<uint8_t>(1001, 7)), small), "the image limit"));
  EXPECT_EQ(load_image_bytes(base64_encode(std::vector<uint8_t>(1000, 7)), small).size(), 1000u);
}

TEST(ImageSource, RemoteAndUnknownSchemesAreRefused) {
  const std::string http = load_error("https://example.com/cat.png");
  EXPECT_TRUE(contains(http, "remote image URLs") && contains(http, "data: URL")) << http;
  EXPECT_TRUE(contains(load_error("HTTP://example.com/cat.png"), "remote image URLs"));
  EXPECT_TRUE(contains(load_error("ftp://example.com/cat.png"), "unsupported image URL scheme 'ftp:'"));
  EXPECT_TRUE(contains(load_error("::"), "neither a data: URL"));
  EXPECT_EQ(load_error(""), "the image URL is empty");
}

// A media root with an image, a symlink out of it, and a file beside it (outside).
class FileUrls : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = fs::temp_directory_path() / ("ds_media_test_" + std::to_string(::getpid()));
    fs::remove_all(base_);
    fs::create_directories(base_ / "root" / "sub");
    fs::create_directories(base_ / "outside");
    write(base_ / "root" / "sub" / "my image.png");
    write(base_ / "outside" / "secret.png");
    fs::create_symlink(base_ / "outside" / "secret.png", base_ / "root" / "escape.png");
    fs::create_symlink(base_ / "root" / "sub" / "my image.png", base_ / "root" / "inside.png");
    fs::create_directories(base_ / "root2");
    write(base_ / "root2" / "x.png");
    options_.media_root = (base_ / "root").string();
  }
  void TearDown() override { fs::remove_all(base_); }

  static void write(const fs::path& p) {
    const std::vector<uint8_t> png = test::fixture_file("png");
    std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(png.data()), std::streamsize(png.size()));
  }
  std::string url(const std::string& rel) const { return "file://" + (base_ / rel).string(); }

  fs::path base_;
  ImageSourceOptions options_;
};

TEST_F(FileUrls, ReadFilesInsideTheRoot) {
  const std::vector<uint8_t> png = test::fixture_file("png");
  EXPECT_EQ(load_image_bytes("file://" + (base_ / "root/sub/my%20image.png").string(), options_), png);
  EXPECT_EQ(load_image_bytes(url("root/inside.png"), options_), png);  // a symlink that stays inside
  EXPECT_EQ(load_image_bytes("file://localhost" + (base_ / "root/inside.png").string(), options_), png);
}

TEST_F(FileUrls, RefuseEverythingOutsideTheRoot) {
  const std::string outside = "no readable image file inside the server's media directory";
  EXPECT_TRUE(contains(load_error(url("outside/secret.png"), options_), outside));
  EXPECT_TRUE(contains(load_error(url("root/escape.png"), options_), outside));  // symlink out
  EXPECT_TRUE(contains(load_error(url("root/../outside/secret.png"), options_), outside));
  EXPECT_TRUE(contains(load_error(url("root2/x.png"), options_), outside));  // a sibling sharing the prefix
  EXPECT_TRUE(contains(load_error(url("root/missing.png"), options_), outside));
  EXPECT_TRUE(contains(load_error(url("root/sub"), options_), outside));  // a directory
  EXPECT_TRUE(contains(load_error("file://" + (base_ / "root/a%00.png").string(), options_), "%-escape"));
  EXPECT_TRUE(contains(load_error("file://host/etc/passwd", options_), "no host"));
}

TEST_F(FileUrls, AreOffWithoutAMediaRoot) {
  EXPECT_TRUE(contains(load_error(url("root/inside.png")), "file:// image URLs are off"));
}

TEST_F(FileUrls, RefuseFilesOverTheSizeCap) {
  options_.max_image_bytes = 100;
  EXPECT_TRUE(contains(load_error(url("root/inside.png"), options_), "the image limit of 100 bytes"));
}

}  // namespace
}  // namespace ds
