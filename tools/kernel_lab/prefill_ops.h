// deltaserve-kernel-lab --prefill-ops (prefill_ops.cu): issue 9 round 2's prefill kernels next to
// the ones they replace (GDN prep v2/v3, Q8_0 -> bf16 dequantization v1/v2), 9B shapes.
#pragma once

void prefill_ops(int reps);
