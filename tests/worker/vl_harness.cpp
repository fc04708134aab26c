#include "tests/worker/vl_harness.h"

#include <rapidjson/document.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>
#include <type_traits>

#include "tests/testutil/testutil.h"
#include "tests/testutil/vision_reference.h"

namespace ds::test {
namespace {

constexpr uint32_t kPatch = 16, kMerge = 2;
constexpr uint64_t kHashBase = 0x5157454e00000000ull;  // any distinct values: image i has kHashBase + i

rapidjson::Document manifest() {
  const std::vector<uint8_t> bytes = read_file(data_path("reference/qwen35_vl.json"));
  rapidjson::Document doc;
  doc.Parse(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  if (doc.HasParseError() || !doc.IsObject()) throw std::runtime_error("reference/qwen35_vl.json does not parse");
  return doc;
}

// The 8-bit image behind HF's patch rows: their inverse (block order, (C, T, py, px) rows, frame 0;
// values (x - 127.5) / 127.5, so x comes back exactly after rounding).
RgbImage image_of_patches(const std::vector<float>& rows, uint32_t grid_h, uint32_t grid_w) {
  const uint32_t width = grid_w * kPatch, height = grid_h * kPatch;
  RgbImage im{width, height, std::vector<uint8_t>(size_t{width} * height * 3)};
  const size_t row_size = 3 * 2 * kPatch * kPatch;
  size_t k = 0;
  for (uint32_t br = 0; br < grid_h / kMerge; ++br) {
    for (uint32_t bc = 0; bc < grid_w / kMerge; ++bc) {
      for (uint32_t ir = 0; ir < kMerge; ++ir) {
        for (uint32_t ic = 0; ic < kMerge; ++ic, ++k) {
          for (uint32_t c = 0; c < 3; ++c) {
            for (uint32_t py = 0; py < kPatch; ++py) {
              for (uint32_t px = 0; px < kPatch; ++px) {
                const float v = rows[k * row_size + (size_t{c} * 2 * kPatch + py) * kPatch + px];
                const size_t y = (br * kMerge + ir) * kPatch + py, x = (bc * kMerge + ic) * kPatch + px;
                im.rgb[(y * im.width + x) * 3 + c] = static_cast<uint8_t>(std::lround(v * 127.5f + 127.5f));
              }
            }
          }
        }
      }
    }
  }
  return im;
}

std::vector<VlImage> load_images() {
  std::vector<VlImage> out;
  const std::vector<VisionReferenceImage> refs = load_vision_reference_images();
  for (size_t i = 0; i < refs.size(); ++i) {
    VlImage v;
    v.image = image_of_patches(refs[i].pixel_values, refs[i].grid_h, refs[i].grid_w);
    v.pixel_values = refs[i].pixel_values;
    v.hash = kHashBase + i;
    out.push_back(std::move(v));
  }
  return out;
}

template <typename T>
std::vector<T> array_of(const rapidjson::Value& a) {
  std::vector<T> v;
  for (const auto& x : a.GetArray()) {
    if constexpr (std::is_integral_v<T>) {
      v.push_back(static_cast<T>(x.GetInt64()));
    } else {
      v.push_back(static_cast<T>(x.GetDouble()));
    }
  }
  return v;
}

// The prompt's image spans: each run of image tokens, with the grid of the image it shows.
void read_spans(const rapidjson::Value& doc, const rapidjson::Value& p, VlPrompt* out) {
  const int32_t pad = doc["image_token_id"].GetInt();
  const std::vector<size_t> which = array_of<size_t>(p["images"]);
  for (uint32_t i = 0; i < out->n(); ++i) {
    if (out->ids[i] != pad || (i > 0 && out->ids[i - 1] == pad)) continue;
    const size_t image = which.at(out->spans.size());
    const auto& grid = doc["images"][static_cast<rapidjson::SizeType>(image)]["grid_thw"].GetArray();
    out->spans.push_back({i, grid[1].GetUint() / kMerge, grid[2].GetUint() / kMerge, kHashBase + image});
    out->span_image.push_back(image);
  }
  if (out->spans.size() != which.size()) throw std::runtime_error(out->name + ": image runs disagree with images");
}

VlPrompt read_prompt(const rapidjson::Value& doc, const std::string& name, const rapidjson::Value& p) {
  VlPrompt r;
  r.name = name;
  r.ids = array_of<int32_t>(p["ids"]);
  read_spans(doc, p, &r);
  r.last_logits = read_f32(data_path(std::string("reference/") + p["last_logits"]["file"].GetString()));
  for (const auto& row : p["logits_summary"]["topk_ids"].GetArray()) r.topk_ids.push_back(array_of<int32_t>(row));
  for (const auto& row : p["logits_summary"]["topk_logits"].GetArray()) r.topk_logits.push_back(array_of<float>(row));
  r.greedy_tokens = array_of<int32_t>(p["greedy_16"]["tokens"]);
  r.greedy_margins = array_of<float>(p["greedy_16"]["margins"]);
  return r;
}

const std::map<std::string, VlPrompt>& prompts() {
  static const std::map<std::string, VlPrompt> all = [] {
    const rapidjson::Document doc = manifest();
    std::map<std::string, VlPrompt> m;
    for (const auto& p : doc["prompts"].GetObject())
      m[p.name.GetString()] = read_prompt(doc, p.name.GetString(), p.value);
    return m;
  }();
  return all;
}

}  // namespace

const std::vector<VlImage>& vl_images() {
  static const std::vector<VlImage> images = load_images();
  return images;
}

const VlPrompt& vl_prompt(const std::string& name) {
  return prompts().at(name);
}

int32_t vl_image_token_id() {
  static const int32_t id = manifest()["image_token_id"].GetInt();
  return id;
}

const VlModel& vl_model() {
  static const VlModel m = [] {
    VlModel v;
    v.gguf = std::make_shared<const GgufFile>(GgufFile::open(data_path("tiny-qwen35-vl-q8_0.gguf")));
    v.mmproj = std::make_shared<const GgufFile>(GgufFile::open(vision_mmproj_path()));
    v.config = load_model_config(*v.gguf);
    return v;
  }();
  return m;
}

std::unique_ptr<StageModel> load_vl_stage(StageRange range, bool with_mmproj, std::unique_ptr<Backend> backend) {
  const VlModel& m = vl_model();
  if (range.last_layer == 0) range = {0, m.config.n_layer};
  StageOptions o;
  o.n_threads = 2;
  if (with_mmproj) o.mmproj = m.mmproj;
  if (backend) return load_stage(m.gguf, m.config, range, o, std::move(backend));
  return load_cpu_stage(m.gguf, m.config, range, o);
}

SeqStep vl_step(const VlPrompt& p, uint64_t seq, uint32_t begin, uint32_t end) {
  SeqStep s;
  s.seq_id = seq;
  s.start_pos = begin;
  s.token_ids.assign(p.ids.begin() + begin, p.ids.begin() + end);
  for (const ImageSpan& im : p.spans) {
    if (im.first_pos < end) s.images.push_back(im);
  }
  return s;
}

void add_pixels(const SeqStep& s, StepInput* in) {
  for (const ImageSpan& im : s.images) {
    const bool inside = im.end_pos() > s.start_pos && im.first_pos < s.start_pos + s.n_tokens();
    const bool have =
        std::any_of(in->images.begin(), in->images.end(), [&](const StepImage& x) { return x.hash == im.hash; });
    if (!inside || have) continue;
    const auto& images = vl_images();
    const auto it = std::find_if(images.begin(), images.end(), [&](const VlImage& v) { return v.hash == im.hash; });
    in->images.push_back({im.hash, it->image});
  }
}

std::vector<float> run_vl_prompt(StageModel& m, const VlPrompt& p, uint64_t seq, const std::vector<uint32_t>& cuts) {
  std::vector<uint32_t> bounds{0};
  bounds.insert(bounds.end(), cuts.begin(), cuts.end());
  bounds.push_back(p.n());
  StepOutput out;
  for (size_t i = 0; i + 1 < bounds.size(); ++i) {
    StepInput in;
    in.seqs.push_back(vl_step(p, seq, bounds[i], bounds[i + 1]));
    if (i + 2 == bounds.size()) in.seqs[0].logit_rows = {bounds[i + 1] - bounds[i] - 1};
    add_pixels(in.seqs[0], &in);
    m.forward(in, &out);
  }
  return out.logits;
}

std::vector<float> vl_all_row_logits(StageModel& m, const VlPrompt& p, uint64_t seq) {
  StepInput in;
  in.seqs.push_back(vl_step(p, seq, 0, p.n()));
  for (uint32_t r = 0; r < p.n(); ++r) in.seqs[0].logit_rows.push_back(r);
  add_pixels(in.seqs[0], &in);
  StepOutput out;
  m.forward(in, &out);
  return out.logits;
}

std::vector<float> vl_decode(StageModel& m, const VlPrompt& p, uint64_t seq, uint32_t pos, int32_t token,
                             bool with_images) {
  StepInput in;
  SeqStep s;
  s.seq_id = seq;
  s.start_pos = pos;
  s.token_ids = {token};
  s.logit_rows = {0};
  if (with_images) s.images = p.spans;
  in.seqs.push_back(std::move(s));
  StepOutput out;
  m.forward(in, &out);
  return out.logits;
}

int32_t vl_argmax(const std::vector<float>& row) {
  return static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
}

float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return INFINITY;
  float d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::abs(a[i] - b[i]));
  return d;
}

}  // namespace ds::test
