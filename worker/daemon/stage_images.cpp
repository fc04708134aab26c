// Vision columns of a plan on a stage (see stage_images.h).
#include "worker/daemon/stage_images.h"

#include <string>
#include <unordered_set>

#include "common/error.h"
#include "common/image_span.h"

namespace ds {
namespace v1 = ipc::v1;
namespace {

std::string who(const v1::StepPlan& plan) {
  return "plan " + std::to_string(plan.plan_id());
}

ImageSpan span_at(const v1::StepPlan& plan, int k) {
  ImageSpan s;
  s.first_pos = plan.image_first_pos(k);
  s.grid_h = plan.image_grid_h(k);
  s.grid_w = plan.image_grid_w(k);
  s.hash = plan.image_hashes(k);
  return s;
}

// One row's spans [first, first + n): sizes inside the limits (so n_tokens() cannot overflow), in
// order, and each starting before the row's last token.
void check_row_spans(const v1::StepPlan& plan, int row, int first, int n, const PlanImageLimits& limits) {
  const std::string at = who(plan) + ": sequence " + std::to_string(plan.seq_ids(row));
  const uint64_t row_end = uint64_t{plan.start_positions(row)} + plan.n_tokens(row);
  std::vector<ImageSpan> spans;
  for (int k = first; k < first + n; ++k) {
    const ImageSpan s = span_at(plan, k);
    if (s.grid_h == 0 || s.grid_w == 0 || s.grid_h > limits.max_grid_side || s.grid_w > limits.max_grid_side ||
        uint64_t{s.grid_h} * s.grid_w > limits.max_image_tokens) {
      throw FormatError(at + ": an image grid of " + std::to_string(s.grid_h) + "x" + std::to_string(s.grid_w) +
                        " tokens is empty or too large");
    }
    if (uint64_t{s.first_pos} + uint64_t{s.grid_h} * s.grid_w > UINT32_MAX) {
      throw FormatError(at + ": an image ends past the largest position");
    }
    if (s.first_pos >= row_end) throw FormatError(at + ": an image starts after the row's tokens");
    spans.push_back(s);
  }
  if (const char* problem = image_spans_problem(spans)) throw FormatError(at + ": " + problem);
}

void check_pixels(const v1::StepPlan& plan, const PlanImageLimits& limits) {
  std::unordered_set<uint64_t> hashes;
  for (const v1::ImagePixels& p : plan.image_pixels()) {
    const std::string at = who(plan) + ": image " + std::to_string(p.hash());
    if (!hashes.insert(p.hash()).second) throw FormatError(at + " has pixels twice");
    if (p.width() == 0 || p.height() == 0 || p.width() > limits.max_pixel_side || p.height() > limits.max_pixel_side ||
        uint64_t{p.width()} * p.height() > limits.max_pixels) {
      throw FormatError(at + ": " + std::to_string(p.width()) + "x" + std::to_string(p.height()) +
                        " pixels is empty or too large");
    }
    if (p.rgb().size() != uint64_t{p.width()} * p.height() * 3) {
      throw FormatError(at + ": " + std::to_string(p.rgb().size()) + " bytes of RGB for " + std::to_string(p.width()) +
                        "x" + std::to_string(p.height()) + " pixels");
    }
  }
}

}  // namespace

void validate_images(const v1::StepPlan& plan, const PlanImageLimits& limits) {
  const int n = plan.seq_ids_size();
  if (plan.n_images_size() == 0) {
    if (plan.image_first_pos_size() || plan.image_grid_h_size() || plan.image_grid_w_size() ||
        plan.image_hashes_size()) {
      throw FormatError(who(plan) + ": image spans without n_images");
    }
  } else {
    if (plan.n_images_size() != n) throw FormatError(who(plan) + ": n_images differs in length from the rows");
    uint64_t total = 0;
    for (int i = 0; i < n; ++i) total += plan.n_images(i);
    if (total != static_cast<uint64_t>(plan.image_first_pos_size()) ||
        total != static_cast<uint64_t>(plan.image_grid_h_size()) ||
        total != static_cast<uint64_t>(plan.image_grid_w_size()) ||
        total != static_cast<uint64_t>(plan.image_hashes_size())) {
      throw FormatError(who(plan) + ": image span arrays differ in length from the sum of n_images");
    }
    int first = 0;
    for (int i = 0; i < n; ++i) {
      check_row_spans(plan, i, first, static_cast<int>(plan.n_images(i)), limits);
      first += static_cast<int>(plan.n_images(i));
    }
  }
  check_pixels(plan, limits);
}

void apply_image_columns(const v1::StepPlan& plan, bool first_stage, StepInput* in) {
  int k = 0;
  for (int i = 0; i < plan.n_images_size(); ++i) {
    std::vector<ImageSpan>& images = in->seqs[static_cast<size_t>(i)].images;
    for (uint32_t j = 0; j < plan.n_images(i); ++j) images.push_back(span_at(plan, k++));
  }
  if (!first_stage) return;
  for (const v1::ImagePixels& p : plan.image_pixels()) {
    StepImage im;
    im.hash = p.hash();
    im.image.width = p.width();
    im.image.height = p.height();
    im.image.rgb.assign(p.rgb().begin(), p.rgb().end());
    in->images.push_back(std::move(im));
  }
}

}  // namespace ds
