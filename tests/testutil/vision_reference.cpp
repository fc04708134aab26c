#include "tests/testutil/vision_reference.h"

#include <rapidjson/document.h>

#include <stdexcept>

#include "tests/testutil/testutil.h"

namespace ds::test {
namespace {

constexpr const char* kManifest = "reference/qwen35_vl.json";

rapidjson::Document manifest() {
  std::vector<uint8_t> bytes = read_file(data_path(kManifest));
  rapidjson::Document doc;
  doc.Parse(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  if (doc.HasParseError() || !doc.IsObject()) throw std::runtime_error("qwen35_vl reference manifest does not parse");
  return doc;
}

// The raw f32 array a manifest entry {file, shape} names, checked against its shape.
std::vector<float> array_file(const rapidjson::Value& entry, size_t* cols) {
  std::vector<float> v = read_f32(data_path(std::string("reference/") + entry["file"].GetString()));
  const auto& shape = entry["shape"].GetArray();
  if (shape.Size() != 2 || v.size() != size_t{shape[0].GetUint()} * shape[1].GetUint()) {
    throw std::runtime_error(std::string(entry["file"].GetString()) + ": size disagrees with its shape");
  }
  *cols = shape[1].GetUint();
  return v;
}

// The mmproj entry names the gzipped fixture; the tests read the decompressed copy.
std::string without_gz(std::string name) {
  const std::string gz = ".gz";
  if (name.size() > gz.size() && name.compare(name.size() - gz.size(), gz.size(), gz) == 0) {
    name.resize(name.size() - gz.size());
  }
  return name;
}

}  // namespace

std::string vision_mmproj_path() {
  return data_path(without_gz(manifest()["mmproj"].GetString()));
}

std::string vision_model_path() {
  return data_path(without_gz(manifest()["gguf"].GetString()));
}

VisionReferencePrompt load_vision_reference_prompt(const std::string& name) {
  const rapidjson::Document doc = manifest();
  const auto& p = doc["prompts"][name.c_str()];
  VisionReferencePrompt r;
  for (const auto& i : p["images"].GetArray())
    r.image_urls.push_back(doc["images"][i.GetUint()]["data_url"].GetString());
  const auto& content = p["messages"][0]["content"];
  if (content.IsString()) r.text = content.GetString();
  if (content.IsArray()) {
    for (const auto& part : content.GetArray()) {
      if (part.HasMember("text")) r.text = part["text"].GetString();
    }
  }
  for (const auto& id : p["ids"].GetArray()) r.ids.push_back(id.GetInt());
  for (const auto& t : p["greedy_16"]["tokens"].GetArray()) r.greedy_tokens.push_back(t.GetInt());
  return r;
}

std::vector<VisionReferenceImage> load_vision_reference_images() {
  const rapidjson::Document doc = manifest();
  std::vector<VisionReferenceImage> out;
  for (const auto& im : doc["images"].GetArray()) {
    VisionReferenceImage r;
    const auto& grid = im["grid_thw"].GetArray();
    r.grid_t = grid[0].GetUint();
    r.grid_h = grid[1].GetUint();
    r.grid_w = grid[2].GetUint();
    r.n_tokens = im["n_tokens"].GetUint();
    r.resized = im["resized"].GetBool();
    size_t patch_cols = 0;
    r.pixel_values = array_file(im["pixel_values"], &patch_cols);
    r.vision_embeds = array_file(im["vision_embeds"], &r.embed_dim);
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace ds::test
