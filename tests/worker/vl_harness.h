// Shared helpers for the vision-input tests: the tiny Qwen3.5-VL fixture (tiny-qwen35-vl-q8_0.gguf
// plus its mmproj) as CPU stages, its reference prompts (tests/data/reference/qwen35_vl.json) with
// their images as spans and pixels, and steps that cut a prompt into chunks.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/gguf.h"
#include "common/image_patches.h"
#include "common/image_span.h"
#include "common/model_config.h"
#include "worker/backend.h"
#include "worker/stage_model.h"

namespace ds::test {

struct VlImage {
  RgbImage image;                   // the pixels HF's processor fed the tower (its final size)
  std::vector<float> pixel_values;  // the reference's patch rows of them
  uint64_t hash = 0;
};

struct VlPrompt {
  std::string name;
  std::vector<int32_t> ids;
  std::vector<ImageSpan> spans;                 // in position order; hash = the VlImage's
  std::vector<size_t> span_image;               // index into vl_images() of each span
  std::vector<float> last_logits;               // [V]
  std::vector<std::vector<int32_t>> topk_ids;   // [T][16]
  std::vector<std::vector<float>> topk_logits;  // [T][16]
  std::vector<int32_t> greedy_tokens;           // 16
  std::vector<float> greedy_margins;            // top-1 minus top-2 of each greedy step
  uint32_t n() const { return static_cast<uint32_t>(ids.size()); }
};

// The fixture's images (decoded from the reference's pixel rows) and prompts, loaded once.
const std::vector<VlImage>& vl_images();
const VlPrompt& vl_prompt(const std::string& name);
int32_t vl_image_token_id();  // the reference's image_token_id

struct VlModel {
  std::shared_ptr<const GgufFile> gguf;
  std::shared_ptr<const GgufFile> mmproj;
  ModelConfig config;
};
const VlModel& vl_model();

// A stage of the fixture over `range` ({0, 0}: all layers), with the mmproj when `with_mmproj`, on
// `backend` (nullptr: the CPU backend).
std::unique_ptr<StageModel> load_vl_stage(StageRange range = {0, 0}, bool with_mmproj = true,
                                          std::unique_ptr<Backend> backend = nullptr);

// Sequence `seq`'s rows [begin, end) of `p`: its images that start before `end`, and no logit rows.
SeqStep vl_step(const VlPrompt& p, uint64_t seq, uint32_t begin, uint32_t end);
// Adds to in->images the pixels of every image of `s` with tokens among its rows (once per hash).
void add_pixels(const SeqStep& s, StepInput* in);

// Runs `p` as `seq` from position 0 in steps cut at `cuts` (ascending positions inside the
// prompt), returning the logits of its last row ([V]).
std::vector<float> run_vl_prompt(StageModel& m, const VlPrompt& p, uint64_t seq,
                                 const std::vector<uint32_t>& cuts = {});

// One step over every row of `p` as `seq` (fresh), with the logits of all rows ([n][V]).
std::vector<float> vl_all_row_logits(StageModel& m, const VlPrompt& p, uint64_t seq);
// A decode step of `token` at `pos` for `seq`, with the images of `p` (all before pos) unless
// `with_images` is false; its logits ([V]).
std::vector<float> vl_decode(StageModel& m, const VlPrompt& p, uint64_t seq, uint32_t pos, int32_t token,
                             bool with_images = true);
int32_t vl_argmax(const std::vector<float>& row);

float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b);

}  // namespace ds::test
