// Vision input on stage 0: the image tokens of a step take the vision tower's encodings instead
// of the token embedding (HF: inputs_embeds.masked_scatter(input_ids == image_token_id, ...)).
// A step names each sequence's images (SeqStep::images) and brings the pixels of those with
// tokens among its rows (StepInput::images, by hash); the embedder checks them, encodes the ones
// it has not encoded yet (an image split over prefill chunks comes in several steps) and
// overwrites the image rows of the embedded input. Encodings stay on the device in a small LRU
// cache keyed by the image hash.
//
// Memory (worker/cache/tower_sizing.h sets it aside): one tower call per image, so a call's
// workspace is that of the step's largest image, never of all its images; and the cache keeps to
// its limits during a step as well, because a new encoding's rows are written into the step as
// soon as it is made: at most the cache plus the one image being encoded are held at once.
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
  size_t max_bytes = size_t{256} << 20;  // device bytes kept (an encoding over it is used, not kept)
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
  // For a checked step: plans write_rows (which cached encodings go where, which images to encode).
  // `in` must outlive the write_rows() call that follows (the pixels are read there).
  void prepare(const StepInput& in);
  // Overwrites the image rows of `x` ([step rows][n_embd], the embedded input of the step
  // prepare() saw) with their encodings (device copies): first from the cache, then each image
  // not cached is encoded (one tower call), its rows written and the encoding cached within the
  // limits. Once per prepare().
  void write_rows(float* x);

  size_t n_encoded() const { return n_encoded_; }  // images encoded so far (cache misses)
  size_t n_cached() const { return cache_.size(); }
  // The most device floats one tower call has taken (VisionTower::workspace_floats of its patches).
  size_t peak_workspace_floats() const { return tower_.peak_workspace_floats(); }
  // The most encoding bytes held at once: the cache and the image being encoded.
  size_t peak_encoding_bytes() const { return peak_encoding_bytes_; }

 private:
  struct Encoding {
    std::shared_ptr<float> rows;  // device [tokens][n_embd], released with the last holder
    uint32_t grid_h = 0, grid_w = 0;
    uint64_t last_use = 0;  // use counter: LRU order
  };
  struct RowCopy {
    size_t dst_row = 0;  // in the step
    size_t src_row = 0;  // in the image's encoding
    size_t n_rows = 0;
  };
  // One image of the step (by hash) and where its rows go.
  struct ImageUse {
    uint64_t hash = 0;
    uint32_t grid_h = 0, grid_w = 0;
    const RgbImage* pixels = nullptr;  // the step's pixels of an image to encode; nullptr: cached
    std::vector<RowCopy> copies;
  };

  const Encoding* cached(const ImageSpan& im) const;
  std::shared_ptr<float> encode(const ImageUse& use);
  void make_room(size_t bytes);
  size_t bytes_of(uint32_t grid_h, uint32_t grid_w) const;
  size_t cached_bytes() const;
  void copy_rows(const ImageUse& use, const float* rows, float* x) const;

  std::shared_ptr<const GgufFile> mmproj_;  // the tower reads it
  Backend& be_;
  VisionTower tower_;
  PatchLayout layout_;
  size_t n_embd_ = 0;
  int32_t image_token_ = -1;
  ImageCacheLimits limits_;
  std::unordered_map<uint64_t, Encoding> cache_;
  uint64_t uses_ = 0;
  size_t n_encoded_ = 0;
  size_t peak_encoding_bytes_ = 0;
  std::vector<ImageUse> plan_;  // the last prepare()'s images
};

}  // namespace ds
