#!/bin/bash
# One device call: CUDA parity tests, kernel lab, 9B synthetic model + bench; short table last.
#   tools/kernel_lab/device_run.sh BUNDLE_DIR [PROMPTS] [BENCH_FLAGS...]
# BUNDLE_DIR is a deploy/bundle.sh folder (carried) holding test_cuda_kernels,
# test_cuda_matmul_gdn, test_cuda_model, test_cuda_decode_ops, deltaserve-kernel-lab, deltaserve-synth and
# deltaserve-bench, built in build-perf. Logs go to $OUT (when set). The model test reads testdata
# from the absolute path baked in at build time (TD below): it is decompressed there from the
# tracked tests/data/*.gz, so the testdata need not travel.
set -u
B=${1:-build-perf/bundle}
PROMPTS=${2:-512,2048,8192}
shift 2 2>/dev/null || shift $#
O=${OUT:-/tmp/lab_out}
mkdir -p "$O"
R="$B/run"
TD=${TESTDATA:-/work/main/build-perf/testdata}
. "$(dirname "$0")/lib.sh"
kl_testdata "$TD"
kl_gpu_header
for t in test_cuda_kernels test_cuda_matmul_gdn test_cuda_model test_cuda_decode_ops; do
  [ -e "$B/bin/$t" ] || { echo "$t: not in the bundle, skipped"; continue; }
  timeout 120 "$R" "$t" > "$O/$t.log" 2>&1
  echo "$t rc=$? $(grep -E '^\[  (PASSED|FAILED) ' "$O/$t.log" | tr '\n' ' ')"
  grep -E "^\[  FAILED  \]|Expected|Which is|worst|typical" "$O/$t.log" | head -20
done
timeout 120 "$R" deltaserve-kernel-lab --reps 20 > "$O/lab.log" 2>&1; echo "lab rc=$?"
( time "$R" deltaserve-synth --shape 9b --out /tmp/9b.gguf ) > "$O/synth.log" 2>&1; echo "synth rc=$?"
timeout 200 "$R" deltaserve-bench --model /tmp/9b.gguf --backend cuda --prompt "$PROMPTS" --gen 128 --repeat 1 "$@" \
  > "$O/bench.log" 2>&1
echo "bench rc=$?"
# NCU=1: GPU time per kernel over ~2 decode steps (after a 64-token prefill and 4 decode steps),
# to split a step's time between the GEMVs and the small ops.
if [ "${NCU:-0}" = 1 ]; then
  NCU_BIN=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  timeout 150 "$NCU_BIN" --clock-control none --csv --print-units base --metrics gpu__time_duration.sum \
    --launch-skip "${NCU_SKIP:-3500}" --launch-count "${NCU_COUNT:-1200}" \
    "$R" deltaserve-bench --model /tmp/9b.gguf --backend cuda --prompt 64 --gen 12 --repeat 1 --no-warmup \
    > "$O/ncu.csv" 2> "$O/ncu.err"
  echo "ncu rc=$?"
fi
echo "==== lab"; cat "$O/lab.log"
echo "==== bench"; tail -8 "$O/bench.log"
if [ "${NCU:-0}" = 1 ]; then echo "==== ncu (GPU time per kernel)"; python3 tools/kernel_lab/ncu_summary.py "$O/ncu.csv" 24; tail -3 "$O/ncu.err"; fi
