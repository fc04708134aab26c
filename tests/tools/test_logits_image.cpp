// deltaserve-logits --mmproj M.gguf --image FILE as a program, on the tiny Qwen3.5-VL fixture
// (CPU): the reference prompts (tests/data/reference/qwen35_vl.json) given with one <|image_pad|>
// per image, their image files (PNG, JPEG; one that smart_resize resizes) written from the
// reference's data URLs, must give HF's last-row logits within 1e-3 (the tolerance of
// test_qwen35_vl_cpu; measured ~5e-6), whether the ids come as --ids or as the rendered --prompt
// text, in one step or in --chunk steps that split an image, in-process or through 2 worker
// processes. And clear errors: a pad count that disagrees with the images, --image without
// --mmproj, a file that is no image.
#include <gtest/gtest.h>
#include <rapidjson/document.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/base64.h"
#include "tests/testutil/testutil.h"
#include "tests/testutil/vision_reference.h"

namespace ds::test {
namespace {

constexpr float kLogitTol = 1e-3f;
const std::string kBin = DS_BIN_DIR;

struct CmdResult {
  int status = -1;
  std::string output;  // stdout and stderr
};

CmdResult run(const std::string& cmd) {
  CmdResult r;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) r.output.append(buf, n);
  const int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

std::string temp_path(const std::string& name) {
  return (std::filesystem::path(testing::TempDir()) / ("logits_image_" + std::to_string(getpid()) + "_" + name))
      .string();
}

// A shell word: single-quoted, with ' as '\''.
std::string quoted(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// One reference prompt as the tool takes it.
struct Case {
  std::string ids;                  // comma-separated, one pad per image
  std::string text;                 // the chat template's rendering (one pad per image)
  std::vector<std::string> images;  // files, in prompt order
  std::vector<float> last_logits;
};

rapidjson::Document manifest() {
  const std::vector<uint8_t> bytes = read_file(data_path("reference/qwen35_vl.json"));
  rapidjson::Document doc;
  doc.Parse(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  return doc;
}

// The image of a data URL, written to a file named after `name`.
std::string write_image(const std::string& data_url, const std::string& name) {
  const std::string path = temp_path(name);
  const auto bytes = base64_decode(data_url.substr(data_url.find(',') + 1));
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes->data()), static_cast<std::streamsize>(bytes->size()));
  return path;
}

Case load_case(const std::string& name) {
  const rapidjson::Document doc = manifest();
  const auto& p = doc["prompts"][name.c_str()];
  const int32_t pad = doc["image_token_id"].GetInt();
  const VisionReferencePrompt ref = load_vision_reference_prompt(name);
  Case c;
  for (size_t i = 0; i < ref.ids.size(); ++i) {  // a run of pads back to the template's one
    if (ref.ids[i] == pad && i > 0 && ref.ids[i - 1] == pad) continue;
    c.ids += (c.ids.empty() ? "" : ",") + std::to_string(ref.ids[i]);
  }
  c.text = p["text"].GetString();
  for (size_t i = 0; i < ref.image_urls.size(); ++i) {
    c.images.push_back(write_image(ref.image_urls[i], name + "_" + std::to_string(i)));
  }
  c.last_logits = read_f32(data_path(std::string("reference/") + p["last_logits"]["file"].GetString()));
  return c;
}

std::string base_command(const Case& c) {
  std::string cmd = kBin + "/deltaserve-logits --model " + vision_model_path() + " --mmproj " + vision_mmproj_path();
  for (const std::string& im : c.images) cmd += " --image " + im;
  return cmd;
}

// Runs the tool with `flags` after the base command; the logits it wrote to --out.
std::vector<float> last_logits_of(const Case& c, const std::string& flags, const std::string& tag) {
  const std::string out = temp_path(tag + ".f32");
  const CmdResult r = run(base_command(c) + " " + flags + " --out " + out);
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("\"positions\""), std::string::npos) << r.output;
  return read_f32(out);
}

float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return INFINITY;
  float d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::abs(a[i] - b[i]));
  return d;
}

TEST(LogitsImage, OneImageMatchesTheReference) {
  const Case c = load_case("one_image");
  EXPECT_LT(max_abs_diff(last_logits_of(c, "--ids " + c.ids, "one_ids"), c.last_logits), kLogitTol);
  // The rendered template text, tokenized by the tool; --chunk 20 splits the image (positions 4..67).
  EXPECT_LT(max_abs_diff(last_logits_of(c, "--chunk 20 --prompt " + quoted(c.text), "one_text"), c.last_logits),
            kLogitTol);
}

TEST(LogitsImage, TwoImagesPngAndJpegMatchTheReference) {
  const Case c = load_case("two_images");
  ASSERT_EQ(c.images.size(), 2u);
  EXPECT_LT(max_abs_diff(last_logits_of(c, "--ids " + c.ids, "two_ids"), c.last_logits), kLogitTol);
}

TEST(LogitsImage, ResizedImageThroughTwoWorkersMatchesTheReference) {
  const Case c = load_case("resized_image");  // 200 x 150: smart_resize makes it 320 x 224
  EXPECT_LT(max_abs_diff(last_logits_of(c, "--workers 2 --ids " + c.ids, "resized_workers"), c.last_logits), kLogitTol);
}

TEST(LogitsImage, RefusesWhatItCannotRun) {
  const Case c = load_case("one_image");
  CmdResult r = run(base_command(c) + " --image " + c.images[0] + " --ids " + c.ids);
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("1 <|image_pad|> tokens (id 151655) for 2 --image files"), std::string::npos) << r.output;
  r = run(kBin + "/deltaserve-logits --model " + vision_model_path() + " --image " + c.images[0] + " --ids 1,2");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("--image needs --mmproj"), std::string::npos) << r.output;
  const std::string not_image = temp_path("not_an_image.png");
  std::ofstream(not_image) << "{\"hello\": 1}";
  r = run(kBin + "/deltaserve-logits --model " + vision_model_path() + " --mmproj " + vision_mmproj_path() +
          " --image " + not_image + " --ids " + c.ids);
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("image 1: unrecognized image data"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace ds::test
