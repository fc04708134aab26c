#include "tools/bench_vision.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>

#include "common/error.h"
#include "common/gguf.h"
#include "common/image_span.h"
#include "common/model_config.h"
#include "coordinator/http/server_options.h"
#include "coordinator/openai/vision_input.h"
#include "worker/backend.h"
#include "worker/models/qwen35_vision.h"
#include "worker/stage_model.h"

namespace ds::bench {
namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kTextAround = 8;  // text tokens before and after the image of the TTFT prompt

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double best(const std::vector<double>& v) {
  return v.empty() ? 0 : *std::min_element(v.begin(), v.end());
}

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / static_cast<double>(v.size());
}

// A gradient in R and G with a hashed pattern in B: some structure and some noise, like a photo.
RgbImage synthetic_image(ImageSize size, uint32_t seed) {
  RgbImage im{size.width, size.height, std::vector<uint8_t>(size_t{size.width} * size.height * 3)};
  for (uint32_t y = 0; y < size.height; ++y) {
    for (uint32_t x = 0; x < size.width; ++x) {
      uint8_t* p = &im.rgb[(size_t{y} * size.width + x) * 3];
      const uint32_t h = (x * 0x9E3779B1u) ^ (y * 0x85EBCA77u) ^ (seed * 0xC2B2AE3Du);
      p[0] = static_cast<uint8_t>(x * 255 / std::max(1u, size.width - 1));
      p[1] = static_cast<uint8_t>(y * 255 / std::max(1u, size.height - 1));
      p[2] = static_cast<uint8_t>((h ^ (h >> 15)) & 0xFF);
    }
  }
  return im;
}

// serve's resize bounds (its --image-min-tokens / --image-max-tokens defaults) for this tower.
ImageSizeLimits serve_limits(const VisionConfig& c) {
  VisionOptions v;
  v.enabled = true;
  v.patch_size = c.patch_size;
  v.merge = c.merge;
  return openai::image_size_limits(v);
}

// One image size's measurements (seconds, one entry per repetition).
struct VisionRow {
  ImageSize asked, used;  // the synthetic image and its size after smart_resize
  PatchGrid grid;         // in patches
  size_t tokens = 0;      // LLM tokens of the image
  size_t n_prompt = 0;    // tokens of both TTFT prompts
  double flops = 0;       // vision_tower_flops
  std::vector<double> resize_s, patches_s, encode_s, ttft_image_s, ttft_text_s;
};

// The steps of one prompt as stage 0 gets them: `chunk` tokens each (0: one step), each naming
// the image when it starts before the step's end and bringing its pixels when it has rows in the
// step; the last step asks for the last row's logits.
std::vector<StepInput> prompt_steps(uint64_t seq, const std::vector<int32_t>& ids, const ImageSpan* span,
                                    const RgbImage* pixels, size_t chunk) {
  std::vector<StepInput> steps;
  const size_t n = ids.size(), per = chunk ? chunk : n;
  for (size_t begin = 0; begin < n; begin += per) {
    const size_t end = std::min(n, begin + per);
    SeqStep s{seq, static_cast<uint32_t>(begin), {ids.begin() + begin, ids.begin() + end}, {}};
    if (end == n) s.logit_rows.push_back(static_cast<uint32_t>(end - begin - 1));
    StepInput in;
    if (span != nullptr && span->first_pos < end) {
      s.images.push_back(*span);
      if (span->end_pos() > begin) in.images.push_back({span->hash, *pixels});
    }
    in.seqs.push_back(std::move(s));
    steps.push_back(std::move(in));
  }
  return steps;
}

// The TTFT prompt around an image of `tokens` pads (at kTextAround), and a text one as long.
struct PromptPair {
  std::vector<int32_t> image, text;
};

class VisionBench {
 public:
  VisionBench(StageModel& stage, const ModelConfig& cfg, const GgufFile& mmproj, Backend& be,
              const VisionBenchOptions& o)
      : stage_(stage), cfg_(cfg), be_(be), tower_(mmproj, be, cfg.n_embd), o_(o) {
    if (cfg.image_token_id < 0) {
      throw ConfigError(
          "the model's vocabulary has no <|image_pad|> token: write it with deltaserve-synth's built-in "
          "tokenizer or --tokenizer-from a Qwen3.5 GGUF");
    }
  }

  VisionRow measure(ImageSize size);
  void print_header() const;
  void print_row(const VisionRow& r) const;
  std::string json_row(const VisionRow& r) const;

 private:
  PromptPair prompts(size_t tokens);
  void run_once(const RgbImage& image, const RgbImage& pixels, const PromptPair& prompts, VisionRow* r);
  double time_encode(const PreprocessedImage& pre);
  double time_prompt(const std::vector<int32_t>& ids, const ImageSpan* span, const RgbImage* pixels);
  std::vector<int32_t> text_ids(size_t n);

  StageModel& stage_;
  const ModelConfig& cfg_;
  Backend& be_;
  VisionTower tower_;
  const VisionBenchOptions& o_;
  std::mt19937 rng_{42};
  uint64_t seq_ = 1;
  uint64_t next_hash_ = 0x5649534E00000000ull;  // a new image hash per prompt: never an encoding-cache hit
};

double VisionBench::time_encode(const PreprocessedImage& pre) {
  const VisionImage v{pre.pixel_values.data(), pre.grid.h, pre.grid.w};
  const size_t n = tower_.tokens_of(v) * tower_.config().out_hidden;
  float* out = be_.alloc(n);
  const auto t0 = Clock::now();
  tower_.encode(&v, 1, out);  // synchronizes before it returns
  const double s = seconds_since(t0);
  be_.release(out);
  return s;
}

double VisionBench::time_prompt(const std::vector<int32_t>& ids, const ImageSpan* span, const RgbImage* pixels) {
  const uint64_t seq = seq_++;
  const std::vector<StepInput> steps = prompt_steps(seq, ids, span, pixels, o_.chunk);
  StepOutput out;
  const auto t0 = Clock::now();
  for (const StepInput& in : steps) stage_.forward(in, &out);
  const double s = seconds_since(t0);
  stage_.drop_sequence(seq);
  return s;
}

// Random text ids, never the image token.
std::vector<int32_t> VisionBench::text_ids(size_t n) {
  std::vector<int32_t> ids(n);
  for (auto& id : ids) {
    do {
      id = static_cast<int32_t>(rng_() % cfg_.n_vocab);
    } while (id == cfg_.image_token_id);
  }
  return ids;
}

PromptPair VisionBench::prompts(size_t tokens) {
  PromptPair p;
  p.image = text_ids(kTextAround);
  p.image.insert(p.image.end(), tokens, cfg_.image_token_id);
  const std::vector<int32_t> after = text_ids(kTextAround);
  p.image.insert(p.image.end(), after.begin(), after.end());
  p.text = text_ids(p.image.size());
  return p;
}

// One repetition: the host's resize and patch rows, the tower alone, both prompts' TTFT.
void VisionBench::run_once(const RgbImage& image, const RgbImage& pixels, const PromptPair& prompts, VisionRow* r) {
  const PatchLayout layout = vision_patch_layout(tower_.config());  // as stage 0 cuts it (ImageEmbedder)
  auto t0 = Clock::now();
  const RgbImage resized = r->used == r->asked ? image : resize_bicubic(image, r->used.width, r->used.height);
  r->resize_s.push_back(seconds_since(t0));
  t0 = Clock::now();
  const PreprocessedImage pre{r->grid, image_patches(resized, layout)};
  r->patches_s.push_back(seconds_since(t0));
  r->encode_s.push_back(time_encode(pre));
  const uint32_t m = tower_.config().merge;
  const ImageSpan span{static_cast<uint32_t>(kTextAround), r->grid.h / m, r->grid.w / m, next_hash_++};
  r->ttft_image_s.push_back(time_prompt(prompts.image, &span, &pixels));
  r->ttft_text_s.push_back(time_prompt(prompts.text, nullptr, nullptr));
}

VisionRow VisionBench::measure(ImageSize size) {
  const VisionConfig& c = tower_.config();
  VisionRow r;
  r.asked = size;
  r.used = smart_resize(size.width, size.height, serve_limits(c));
  r.grid = patch_grid(r.used, vision_patch_layout(c));
  r.tokens = image_token_count(r.grid, c.merge);
  r.flops = vision_tower_flops(c, r.grid.n_patches());
  const RgbImage image = synthetic_image(size, size.width * 31 + size.height);
  const RgbImage pixels = r.used == size ? image : resize_bicubic(image, r.used.width, r.used.height);
  const PromptPair p = prompts(r.tokens);
  r.n_prompt = p.image.size();
  if (o_.warmup) {  // untimed: first kernels and workspaces at this size
    VisionRow scratch = r;
    run_once(image, pixels, p, &scratch);
  }
  for (int k = 0; k < o_.repeat; ++k) run_once(image, pixels, p, &r);
  return r;
}

void VisionBench::print_header() const {
  const VisionConfig& c = tower_.config();
  std::printf("vision tower %s: depth %u, hidden %u, %u heads, MLP %u, patch %u, merge %u, %ux%u positions -> %u\n",
              o_.mmproj_path.c_str(), c.depth, c.hidden, c.heads, c.ffn, c.patch_size, c.merge, c.pos_side, c.pos_side,
              c.out_hidden);
  std::printf("model %s: %u layers, hidden %u; backend %s, threads %d, best of %d%s\n", o_.context.model.c_str(),
              cfg_.n_layer, cfg_.n_embd, o_.context.backend.c_str(), o_.context.threads, o_.repeat,
              o_.warmup ? ", after a warm-up run per size" : "");
  std::printf(
      "encode: host patch rows to merged embeddings; TTFT: %zu text + image + %zu text tokens vs as many text "
      "tokens, %s\n",
      kTextAround, kTextAround, o_.chunk ? ("prefill steps of " + std::to_string(o_.chunk)).c_str() : "one step");
  std::printf("%-11s %-11s %-8s %-7s %-10s %-9s %-9s %-10s %-9s %-12s %-11s %-6s\n", "image", "resized", "patches",
              "tokens", "resize_ms", "patch_ms", "enc_ms", "enc_GFLOP", "TFLOP/s", "ttft_img_ms", "ttft_txt_ms",
              "ratio");
  std::fflush(stdout);
}

std::string size_text(ImageSize s) {
  return std::to_string(s.width) + "x" + std::to_string(s.height);
}

void VisionBench::print_row(const VisionRow& r) const {
  const double enc = best(r.encode_s), img = best(r.ttft_image_s), txt = best(r.ttft_text_s);
  std::printf("%-11s %-11s %-8llu %-7zu %-10.2f %-9.2f %-9.2f %-10.1f %-9.2f %-12.2f %-11.2f %-6.2f\n",
              size_text(r.asked).c_str(), size_text(r.used).c_str(),
              static_cast<unsigned long long>(r.grid.n_patches()), r.tokens, best(r.resize_s) * 1e3,
              best(r.patches_s) * 1e3, enc * 1e3, r.flops * 1e-9, enc > 0 ? r.flops / enc * 1e-12 : 0, img * 1e3,
              txt * 1e3, txt > 0 ? img / txt : 0);
  std::fflush(stdout);
}

std::string samples_ms(const std::vector<double>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + json_number(v[i] * 1e3);
  return out + "]";
}

std::string VisionBench::json_row(const VisionRow& r) const {
  const double enc = mean(r.encode_s), img = mean(r.ttft_image_s), txt = mean(r.ttft_text_s);
  std::string out = "{";
  json_field(out, "model", json_string(o_.context.model));
  json_field(out, "mmproj", json_string(o_.mmproj_path));
  json_field(out, "backend", json_string(o_.context.backend));
  json_field(out, "test", json_string("vision"));
  json_field(out, "image_width", std::to_string(r.asked.width));
  json_field(out, "image_height", std::to_string(r.asked.height));
  json_field(out, "width", std::to_string(r.used.width));
  json_field(out, "height", std::to_string(r.used.height));
  json_field(out, "n_patches", std::to_string(r.grid.n_patches()));
  json_field(out, "n_image_tokens", std::to_string(r.tokens));
  json_field(out, "n_prompt", std::to_string(r.n_prompt));
  json_field(out, "n_batch", std::to_string(o_.chunk ? std::min(o_.chunk, r.n_prompt) : r.n_prompt));
  json_field(out, "n_threads", std::to_string(o_.context.threads));
  json_field(out, "type_k", json_string(o_.context.type_k));
  json_field(out, "type_v", json_string(o_.context.type_v));
  json_field(out, "repetitions", std::to_string(r.encode_s.size()));
  json_field(out, "resize_ms", json_number(mean(r.resize_s) * 1e3));
  json_field(out, "patches_ms", json_number(mean(r.patches_s) * 1e3));
  json_field(out, "encode_ms", json_number(enc * 1e3));
  json_field(out, "encode_ms_best", json_number(best(r.encode_s) * 1e3));
  json_field(out, "encode_flop", json_number(r.flops));
  json_field(out, "encode_tflop_per_s", enc > 0 ? json_number(r.flops / enc * 1e-12) : "null");
  json_field(out, "ttft_image_ms", json_number(img * 1e3));
  json_field(out, "ttft_text_ms", json_number(txt * 1e3));
  json_field(out, "ttft_ratio", txt > 0 ? json_number(img / txt) : "null");
  json_field(out, "encode_samples_ms", samples_ms(r.encode_s));
  json_field(out, "ttft_image_samples_ms", samples_ms(r.ttft_image_s));
  json_field(out, "ttft_text_samples_ms", samples_ms(r.ttft_text_s));
  return out + "}";
}

}  // namespace

std::vector<ImageSize> parse_image_sizes(const cli::Usage& usage, const std::string& flag, const std::string& v) {
  std::vector<ImageSize> out;
  for (const std::string& item : cli::split_commas(v)) {
    const size_t x = item.find('x');
    const std::string w = item.substr(0, x), h = x == std::string::npos ? w : item.substr(x + 1);
    out.push_back(
        {cli::parse_number<uint32_t>(usage, flag, w, 1, 16384), cli::parse_number<uint32_t>(usage, flag, h, 1, 16384)});
  }
  if (out.empty()) usage.fail(flag + " is empty");
  return out;
}

double vision_tower_flops(const VisionConfig& c, uint64_t n_patches) {
  const double N = static_cast<double>(n_patches), h = c.hidden, F = c.ffn, D = c.out_hidden;
  const double m2 = static_cast<double>(c.patches_per_token()), wide = m2 * h;
  const double embed = 2 * N * static_cast<double>(c.patch_floats()) * h;
  const double block = 2 * N * (4 * h * h + 2 * h * F) + 4 * N * N * h;
  const double merger = 2 * (N / m2) * (wide * wide + wide * D);
  return embed + c.depth * block + merger;
}

void run_vision_bench(StageModel& stage, const ModelConfig& cfg, const GgufFile& mmproj, Backend& tower_backend,
                      const VisionBenchOptions& o) {
  VisionBench bench(stage, cfg, mmproj, tower_backend, o);
  if (!o.json) bench.print_header();
  for (const ImageSize& size : o.sizes) {
    const VisionRow r = bench.measure(size);
    if (o.json) {
      std::printf("%s\n", bench.json_row(r).c_str());
      std::fflush(stdout);
    } else {
      bench.print_row(r);
    }
  }
}

}  // namespace ds::bench
