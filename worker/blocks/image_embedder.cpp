#include "worker/blocks/image_embedder.h"

#include <algorithm>
#include <string>
#include <utility>

#include "common/error.h"
#include "common/gguf.h"
#include "common/model_config.h"
#include "worker/backend.h"

namespace ds {
namespace {

// Sequence positions [lo, hi) of `im` that fall among the step's rows of `s` (empty: lo >= hi).
struct PosRange {
  uint32_t lo = 0, hi = 0;
  bool empty() const { return lo >= hi; }
};

PosRange positions_in_step(const ImageSpan& im, const SeqStep& s) {
  return {std::max(im.first_pos, s.start_pos), std::min(im.end_pos(), s.start_pos + s.n_tokens())};
}

const StepImage* pixels_of(const StepInput& in, uint64_t hash) {
  for (const StepImage& p : in.images) {
    if (p.hash == hash) return &p;
  }
  return nullptr;
}

std::string size_text(uint32_t a, uint32_t b) {
  return std::to_string(a) + "x" + std::to_string(b);
}

// The pixels must be a whole number of merge blocks whose grid is the span's.
void check_pixels(const RgbImage& image, const ImageSpan& im, uint32_t block, const std::string& who) {
  if (image.rgb.size() != size_t{image.width} * image.height * 3) {
    throw ConfigError(who + ": " + std::to_string(image.rgb.size()) + " bytes of RGB for a " +
                      size_text(image.width, image.height) + " image");
  }
  if (image.width == 0 || image.height == 0 || image.width % block != 0 || image.height % block != 0) {
    throw ConfigError(who + ": a " + size_text(image.width, image.height) + " image is not a whole number of " +
                      std::to_string(block) + "-pixel merge blocks (the coordinator resizes images)");
  }
  if (image.height / block != im.grid_h || image.width / block != im.grid_w) {
    throw ConfigError(who + ": its " + size_text(image.width, image.height) + " pixels make a " +
                      size_text(image.height / block, image.width / block) + " token grid, the span says " +
                      size_text(im.grid_h, im.grid_w));
  }
}

std::shared_ptr<const GgufFile> required(std::shared_ptr<const GgufFile> mmproj) {
  if (!mmproj) throw ConfigError("image embedder without an mmproj");
  return mmproj;
}

}  // namespace

bool step_has_image_rows(const StepInput& in) {
  for (const SeqStep& s : in.seqs) {
    for (const ImageSpan& im : s.images) {
      if (!positions_in_step(im, s).empty()) return true;
    }
  }
  return false;
}

ImageEmbedder::ImageEmbedder(std::shared_ptr<const GgufFile> mmproj, Backend& be, const ModelConfig& config,
                             ImageCacheLimits limits)
    : mmproj_(required(std::move(mmproj))),
      be_(be),
      tower_(*mmproj_, be, config.n_embd),
      n_embd_(config.n_embd),
      image_token_(config.image_token_id),
      limits_(limits) {
  const VisionConfig& v = tower_.config();
  layout_.patch = v.patch_size;
  layout_.merge = v.merge;
  layout_.temporal = v.temporal;
  for (size_t c = 0; c < 3; ++c) {
    if (v.image_mean.size() == 3) layout_.mean[c] = v.image_mean[c];
    if (v.image_std.size() == 3) layout_.std[c] = v.image_std[c];
  }
}

ImageEmbedder::~ImageEmbedder() = default;

void ImageEmbedder::check(const StepInput& in) const {
  const uint32_t block = layout_.patch * layout_.merge;
  for (const SeqStep& s : in.seqs) {
    for (const ImageSpan& im : s.images) {
      const PosRange r = positions_in_step(im, s);
      if (r.empty()) continue;
      const std::string who =
          "sequence " + std::to_string(s.seq_id) + ", image at position " + std::to_string(im.first_pos);
      const StepImage* pixels = pixels_of(in, im.hash);
      if (pixels == nullptr) throw ConfigError(who + ": no pixels for image hash " + std::to_string(im.hash));
      check_pixels(pixels->image, im, block, who);
      if (image_token_ < 0) continue;  // a vocabulary without <|image_pad|>: nothing to compare
      for (uint32_t p = r.lo; p < r.hi; ++p) {
        if (s.token_ids[p - s.start_pos] != image_token_) {
          throw ConfigError(who + ": position " + std::to_string(p) + " holds token " +
                            std::to_string(s.token_ids[p - s.start_pos]) + ", not the image token " +
                            std::to_string(image_token_));
        }
      }
    }
  }
}

const ImageEmbedder::Encoding* ImageEmbedder::cached(const ImageSpan& im) const {
  const auto it = cache_.find(im.hash);
  if (it == cache_.end() || it->second.grid_h != im.grid_h || it->second.grid_w != im.grid_w) return nullptr;
  return &it->second;
}

void ImageEmbedder::prepare(const StepInput& in) {
  ++step_;
  plan_.clear();
  std::vector<std::pair<const ImageSpan*, const RgbImage*>> missing;
  for (const SeqStep& s : in.seqs) {
    for (const ImageSpan& im : s.images) {
      if (positions_in_step(im, s).empty()) continue;
      if (cached(im) != nullptr) {
        cache_.at(im.hash).last_use = step_;
        continue;
      }
      const bool listed =
          std::any_of(missing.begin(), missing.end(), [&](const auto& m) { return m.first->hash == im.hash; });
      if (!listed) missing.emplace_back(&im, &pixels_of(in, im.hash)->image);
    }
  }
  if (!missing.empty()) encode(missing);
  evict();
  size_t offset = 0;  // the sequence's first row in the step
  for (const SeqStep& s : in.seqs) {
    for (const ImageSpan& im : s.images) {
      const PosRange r = positions_in_step(im, s);
      if (r.empty()) continue;
      plan_.push_back({offset + (r.lo - s.start_pos), cached(im)->rows + size_t{r.lo - im.first_pos} * n_embd_,
                       size_t{r.hi - r.lo}});
    }
    offset += s.n_tokens();
  }
}

// All missing images in one tower call (each attends only to itself); their encodings share the
// call's device block, which goes when the last of them is evicted.
void ImageEmbedder::encode(const std::vector<std::pair<const ImageSpan*, const RgbImage*>>& missing) {
  std::vector<std::vector<float>> patches(missing.size());
  std::vector<VisionImage> images;
  size_t tokens = 0;
  for (size_t i = 0; i < missing.size(); ++i) {
    const ImageSpan& im = *missing[i].first;
    patches[i] = image_patches(*missing[i].second, layout_);
    images.push_back({patches[i].data(), im.grid_h * layout_.merge, im.grid_w * layout_.merge});
    tokens += im.n_tokens();
  }
  Backend& be = be_;
  const std::shared_ptr<float> block(be.alloc(tokens * n_embd_), [&be](float* p) { be.release(p); });
  tower_.encode(images.data(), images.size(), block.get());
  size_t row = 0;
  for (const auto& [im, rgb] : missing) {
    cache_[im->hash] = Encoding{block, block.get() + row * n_embd_, im->grid_h, im->grid_w, step_};
    row += im->n_tokens();
  }
  n_encoded_ += missing.size();
}

// Least recently used first, never an encoding the current step uses.
void ImageEmbedder::evict() {
  const auto bytes = [&] {
    size_t b = 0;
    for (const auto& [hash, e] : cache_) b += size_t{e.grid_h} * e.grid_w * n_embd_ * sizeof(float);
    return b;
  };
  while (cache_.size() > limits_.max_images || bytes() > limits_.max_bytes) {
    auto oldest = cache_.end();
    for (auto it = cache_.begin(); it != cache_.end(); ++it) {
      if (it->second.last_use < step_ && (oldest == cache_.end() || it->second.last_use < oldest->second.last_use)) {
        oldest = it;
      }
    }
    if (oldest == cache_.end()) return;  // all in use by this step
    cache_.erase(oldest);
  }
}

void ImageEmbedder::write_rows(float* x) const {
  for (const RowCopy& c : plan_) be_.copy(x + c.dst_row * n_embd_, c.src, c.n_rows * n_embd_);
}

}  // namespace ds
