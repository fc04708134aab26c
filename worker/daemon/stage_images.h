// The plan's vision columns on a stage (issue 31; StepPlan in step.proto): checks them, then puts
// each row's image spans on its SeqStep (every stage: attention ropes by them) and, on stage 0,
// the pixels into StepInput::images (the vision tower embeds them).
#pragma once

#include "common/ipc/protocol.h"
#include "worker/stage_model.h"

namespace ds {

// Bounds on what one plan may carry, far above what a coordinator sends (its own limits are
// --image-max-tokens and friends); they only stop a malformed frame from asking for absurd work.
struct PlanImageLimits {
  uint32_t max_grid_side = 1u << 14;              // merged rows or columns of one image
  uint64_t max_image_tokens = uint64_t{1} << 20;  // grid_h * grid_w of one image
  uint32_t max_pixel_side = 1u << 15;             // width or height of one image's pixels
  uint64_t max_pixels = uint64_t{1} << 27;        // width * height of one image
};

// Checks the image columns against each other and the rows: n_images empty or one per row, the
// span arrays as long as their sum, each row's spans well formed (common/image_span.h) and
// starting before the row ends, pixels of the stated size, one per hash. Throws ds::FormatError.
void validate_images(const ipc::v1::StepPlan& plan, const PlanImageLimits& limits = {});

// Fills in->seqs[i].images (parallel to the plan rows) and, when `first_stage`, in->images.
void apply_image_columns(const ipc::v1::StepPlan& plan, bool first_stage, StepInput* in);

}  // namespace ds
