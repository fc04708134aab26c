#!/bin/bash
# One device call: CUDA parity tests, kernel lab, 9B synthetic model + bench; short table last.
#   tools/kernel_lab/device_run.sh BIN_DIR [PROMPTS]      (BIN_DIR e.g. build-perf/bin, carried)
# Logs go to $OUT (when set). The tests read testdata from the absolute path baked in at build
# time, so that path is linked to the carried copy first.
set -u
B=${1:-build-perf/bin}
PROMPTS=${2:-512,2048,8192}
O=${OUT:-/tmp/lab_out}
mkdir -p "$O"
TD=$(strings "$B/test_cuda_model" | grep -m1 '/build-perf/testdata$' || true)
if [ -n "$TD" ] && [ ! -e "$TD" ]; then mkdir -p "$(dirname "$TD")" && ln -s "$PWD/build-perf/testdata" "$TD"; fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
"$B/test_cuda_matmul_gdn" > "$O/test_matmul_gdn.log" 2>&1; echo "test_cuda_matmul_gdn rc=$?"
grep -E "FAILED|Failure|error|Expected|Which is|worst|typical" "$O/test_matmul_gdn.log" | head -40
"$B/test_cuda_model" > "$O/test_model.log" 2>&1; echo "test_cuda_model rc=$?"
grep -E "FAILED|Failure|\[ cuda|Expected|Which is|max|logit" "$O/test_model.log" | head -40
"$B/deltaserve-kernel-lab" --reps 20 > "$O/lab.log" 2>&1; echo "lab rc=$?"
( time "$B/deltaserve-synth" --shape 9b --out /tmp/9b.gguf ) > "$O/synth.log" 2>&1; echo "synth rc=$?"
"$B/deltaserve-bench" --model /tmp/9b.gguf --backend cuda --prompt "$PROMPTS" --gen 128 --repeat 1 > "$O/bench.log" 2>&1
echo "bench (default, f32 paths) rc=$?"
"$B/deltaserve-bench" --model /tmp/9b.gguf --backend cuda --bf16-prefill --prompt "$PROMPTS" --gen 128 --repeat 1 > "$O/bench_bf16.log" 2>&1
echo "bench (--bf16-prefill) rc=$?"
echo "==== lab"; cat "$O/lab.log"
echo "==== bench default"; tail -4 "$O/bench.log"
echo "==== bench --bf16-prefill"; tail -4 "$O/bench_bf16.log"
