#!/bin/bash
# One device call for the prefill work (issue 9): CUDA parity tests, kernel lab, 9B synthetic
# model, bench with the default (bf16 tensor-core GEMM, chunked GDN, tiled attention) and the f32
# prefill path. Short table last.
#   tools/kernel_lab/prefill_run.sh DIR [PROMPTS]   (DIR holds bin/ and lib/, carried)
# The test binaries read testdata from the absolute path baked in at build time
# (/work/main/build-cuda/testdata); it is re-created from tests/data/*.gz when missing.
set -u
D=$1
PROMPTS=${2:-512,2048,8192}
B=$D/bin
O=${OUT:-/tmp/pf_out}
mkdir -p "$O"
. "$(dirname "$0")/lib.sh"
kl_prepare "$D" /work/main/build-cuda/testdata
kl_run_tests "$B" "$O" "^\[  FAILED|Failure|Expected|Which is|\[ cuda|\[ attn" 30 \
  test_cuda_matmul_gdn:50 test_cuda_kernels:25 test_cuda_model:80
timeout 50 "$B/deltaserve-kernel-lab" --reps 10 > "$O/lab.log" 2>&1; echo "lab rc=$?"
"$B/deltaserve-synth" --shape 9b --out /tmp/9b.gguf > "$O/synth.log" 2>&1; echo "synth rc=$?"
timeout 60 "$B/deltaserve-bench" --model /tmp/9b.gguf --backend cuda --prompt "$PROMPTS" --gen 8 --repeat 2 > "$O/bench.log" 2>&1
echo "bench default rc=$?"
timeout 35 "$B/deltaserve-bench" --model /tmp/9b.gguf --backend cuda --prefill-precision f32 --prompt "$PROMPTS" --gen 8 --repeat 1 > "$O/bench_f32.log" 2>&1
echo "bench --prefill-precision f32 rc=$?"
timeout 30 "$B/deltaserve-bench" --model /tmp/9b.gguf --backend cuda --prompt 8192 --batch 2048 --gen 0 --repeat 2 > "$O/bench_b2048.log" 2>&1
echo "bench 8192 in 2048-token steps rc=$?"
echo "==== lab"; grep -E "gemm tc|gdn|attn prefill|prefill step" "$O/lab.log"
echo "==== bench default"; tail -6 "$O/bench.log"
echo "==== bench --prefill-precision f32"; tail -4 "$O/bench_f32.log"
echo "==== bench 8192 in 2048-token steps"; tail -2 "$O/bench_b2048.log"
