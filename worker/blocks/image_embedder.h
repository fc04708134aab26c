// Vision input on stage 0: the image tokens of a step take the vision tower's encodings instead
// of the token embedding (HF: inputs_embeds.masked_scatter(input_ids == image_token_id, ...)).
// A step names each sequence's images (SeqStep::images) and brings the pixels of those with
// tokens among its rows (StepInput::images, by hash); the embedder checks them, encodes the ones
// it has not encoded yet (an image split over prefill chunks comes in several steps) and
// overwrites the image rows of the embedded input. Encodings stay on the device in a small LRU
// cache keyed by the image hash.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "common/image_patches.h"
#include "common/image_span.h"
#include "worker/models/qwen35_vision.h"
#include "worker/stage_model.h"

namespace ds {

class Backend;
class GgufFile;
struct ModelConfig;

// Whether a sequence of the step has image tokens among the step's rows.
bool step_has_image_rows(const StepInput& in);

struct ImageCacheLimits {
  size_t max_images = 16;                // encodings kept
  size_t max_bytes = size_t{256} << 20;  // device bytes kept (those of the current step always)
};

class ImageEmbedder {
 public:
  // Builds the vision tower of `mmproj` on `be` for the text model `config` (its out_hidden must
  // be config.n_embd). `be` must outlive the embedder. Throws ConfigError for a bad mmproj.
  ImageEmbedder(std::shared_ptr<const GgufFile> mmproj, Backend& be, const ModelConfig& config,
                ImageCacheLimits limits = {});
  ~ImageEmbedder();
  ImageEmbedder(const ImageEmbedder&) = delete;
  ImageEmbedder& operator=(const ImageEmbedder&) = delete;

  const VisionConfig& vision() const { return tower_.config(); }

  // Throws ConfigError naming the sequence and the problem: an image with tokens in the step
  // but no pixels, pixels whose size is no whole number of merge blocks or whose grid disagrees
  // with the span's, an image position whose token is not the model's image token. Changes
  // nothing.
  void check(const StepInput& in) const;
  // For a checked step: encodes its images that are not cached, then plans write_rows.
  void prepare(const StepInput& in);
  // Overwrites the image rows of `x` ([step rows][n_embd], the embedded input of the step
  // prepare() saw) with their encodings (device copies).
  void write_rows(float* x) const;

  size_t n_encoded() const { return n_encoded_; }  // images encoded so far (cache misses)
  size_t n_cached() const { return cache_.size(); }

 private:
  struct Encoding {
    std::shared_ptr<float> block;  // device rows of the encode() call that made it (shared)
    const float* rows = nullptr;   // [tokens][n_embd] inside block
    uint32_t grid_h = 0, grid_w = 0;
    uint64_t last_use = 0;  // step counter: LRU order, and the current step's are pinned
  };
  struct RowCopy {
    size_t dst_row = 0;
    const float* src = nullptr;
    size_t n_rows = 0;
  };

  const Encoding* cached(const ImageSpan& im) const;
  void encode(const std::vector<std::pair<const ImageSpan*, const RgbImage*>>& missing);
  void evict();

  std::shared_ptr<const GgufFile> mmproj_;  // the tower reads it
  Backend& be_;
  VisionTower tower_;
  PatchLayout layout_;
  size_t n_embd_ = 0;
  int32_t image_token_ = -1;
  ImageCacheLimits limits_;
  std::unordered_map<uint64_t, Encoding> cache_;
  uint64_t step_ = 0;
  size_t n_encoded_ = 0;
  std::vector<RowCopy> plan_;  // the last prepare()'s row copies
};

}  // namespace ds
