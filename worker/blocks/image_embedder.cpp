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
      layout_(vision_patch_layout(tower_.config())),
      n_embd_(config.n_embd),
      image_token_(config.image_token_id),
      limits_(limits) {}

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
  plan_.clear();
  size_t offset = 0;  // the sequence's first row in the step
  for (const SeqStep& s : in.seqs) {
    for (const ImageSpan& im : s.images) {
      const PosRange r = positions_in_step(im, s);
      if (r.empty()) continue;
      auto use = std::find_if(plan_.begin(), plan_.end(), [&](const ImageUse& u) { return u.hash == im.hash; });
      if (use == plan_.end()) {
        const Encoding* e = cached(im);
        if (e != nullptr) cache_.at(im.hash).last_use = ++uses_;
        plan_.push_back({im.hash, im.grid_h, im.grid_w, e != nullptr ? nullptr : &pixels_of(in, im.hash)->image, {}});
        use = plan_.end() - 1;
      }
      use->copies.push_back({offset + (r.lo - s.start_pos), size_t{r.lo - im.first_pos}, size_t{r.hi - r.lo}});
    }
    offset += s.n_tokens();
  }
}

// The cached images first: once their rows are written the cache may make room for the new ones.
void ImageEmbedder::write_rows(float* x) {
  for (const ImageUse& use : plan_) {
    if (use.pixels == nullptr) copy_rows(use, cache_.at(use.hash).rows.get(), x);
  }
  for (const ImageUse& use : plan_) {
    if (use.pixels != nullptr) copy_rows(use, encode(use).get(), x);
  }
  plan_.clear();
}

void ImageEmbedder::copy_rows(const ImageUse& use, const float* rows, float* x) const {
  for (const RowCopy& c : use.copies) be_.copy(x + c.dst_row * n_embd_, rows + c.src_row * n_embd_, c.n_rows * n_embd_);
}

// One tower call for one image (each image attends only to itself, so this is what a call of
// several would give it), cached when it fits the limits.
std::shared_ptr<float> ImageEmbedder::encode(const ImageUse& use) {
  cache_.erase(use.hash);  // an encoding of another grid under the same hash
  const size_t bytes = bytes_of(use.grid_h, use.grid_w);
  const bool keep = limits_.max_images > 0 && bytes <= limits_.max_bytes;
  if (keep) make_room(bytes);
  peak_encoding_bytes_ = std::max(peak_encoding_bytes_, cached_bytes() + bytes);
  const std::vector<float> patches = image_patches(*use.pixels, layout_);
  const VisionImage image{patches.data(), use.grid_h * layout_.merge, use.grid_w * layout_.merge};
  Backend& be = be_;
  std::shared_ptr<float> rows(be.alloc(bytes / sizeof(float)), [&be](float* p) { be.release(p); });
  tower_.encode(&image, 1, rows.get());
  ++n_encoded_;
  if (keep) cache_[use.hash] = Encoding{rows, use.grid_h, use.grid_w, ++uses_};
  return rows;
}

// Evicts the least recently used until an encoding of `bytes` fits beside the rest.
void ImageEmbedder::make_room(size_t bytes) {
  while (!cache_.empty() && (cache_.size() >= limits_.max_images || cached_bytes() + bytes > limits_.max_bytes)) {
    uint64_t oldest = 0, when = UINT64_MAX;
    for (const auto& [hash, e] : cache_) {
      if (e.last_use < when) {
        oldest = hash;
        when = e.last_use;
      }
    }
    cache_.erase(oldest);
  }
}

size_t ImageEmbedder::bytes_of(uint32_t grid_h, uint32_t grid_w) const {
  return size_t{grid_h} * grid_w * n_embd_ * sizeof(float);
}

size_t ImageEmbedder::cached_bytes() const {
  size_t b = 0;
  for (const auto& [hash, e] : cache_) b += bytes_of(e.grid_h, e.grid_w);
  return b;
}

}  // namespace ds
