#include "tests/coordinator/media/vl_fixture.h"

#include <rapidjson/document.h>

#include <stdexcept>

#include "common/base64.h"
#include "tests/testutil/testutil.h"

namespace ds::test {

namespace {

const rapidjson::Document& fixture_json() {
  static const rapidjson::Document doc = [] {
    const std::vector<uint8_t> text = read_file(data_path("reference/qwen35_vl.json"));
    rapidjson::Document d;
    d.Parse(reinterpret_cast<const char*>(text.data()), text.size());
    if (d.HasParseError()) throw std::runtime_error("qwen35_vl.json does not parse");
    return d;
  }();
  return doc;
}

}  // namespace

FixtureProcessor fixture_processor() {
  const rapidjson::Value& p = fixture_json()["preprocessor_config"];
  FixtureProcessor out;
  out.layout.patch = p["patch_size"].GetUint();
  out.layout.merge = p["merge_size"].GetUint();
  out.layout.temporal = p["temporal_patch_size"].GetUint();
  for (int c = 0; c < 3; ++c) {
    out.layout.mean[c] = p["image_mean"][c].GetFloat();
    out.layout.std[c] = p["image_std"][c].GetFloat();
  }
  out.rescale_factor = p["rescale_factor"].GetDouble();
  out.limits.factor = out.layout.patch * out.layout.merge;
  out.limits.min_pixels = p["size"]["shortest_edge"].GetUint64();
  out.limits.max_pixels = p["size"]["longest_edge"].GetUint64();
  return out;
}

const std::vector<FixtureImage>& fixture_images() {
  static const std::vector<FixtureImage> images = [] {
    const rapidjson::Document& doc = fixture_json();
    std::vector<FixtureImage> out;
    for (const auto& v : doc["images"].GetArray()) {
      FixtureImage im;
      im.width = v["width"].GetUint();
      im.height = v["height"].GetUint();
      im.format = v["format"].GetString();
      im.data_url = v["data_url"].GetString();
      im.resized = v["resized"].GetBool();
      const auto& g = v["grid_thw"].GetArray();
      im.grid = {g[0].GetUint(), g[1].GetUint(), g[2].GetUint()};
      im.n_tokens = v["n_tokens"].GetUint();
      im.pixel_values = read_f32(data_path(std::string("reference/") + v["pixel_values"]["file"].GetString()));
      out.push_back(std::move(im));
    }
    return out;
  }();
  return images;
}

std::vector<uint8_t> fixture_file(const std::string& format) {
  for (const FixtureImage& f : fixture_images()) {
    if (f.format != format) continue;
    const auto bytes = base64_decode(std::string_view(f.data_url).substr(f.data_url.find(',') + 1));
    if (!bytes) throw std::runtime_error("the fixture's data URL is not base64");
    return *bytes;
  }
  throw std::runtime_error("no fixture image of format " + format);
}

}  // namespace ds::test
