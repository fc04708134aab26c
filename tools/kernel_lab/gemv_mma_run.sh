#!/bin/bash
# One device call for the small-batch tensor-core GEMV (issue 14/10): its parity test, the kernel
# lab's comparison with today's paths at n = 1..64, then the 9B synthetic model's speculative
# verify cost (--spec-k 3) with the new kernel (default) and without it. Short table last.
#   tools/kernel_lab/gemv_mma_run.sh DIR [LIMIT]   (DIR holds bin/ and lib/ from deploy/bundle.sh, carried)
# Later benches are skipped when the call's time (LIMIT seconds) would run out.
set -u
D=$1
LIMIT=${2:-190}
B=$D/bin
O=${OUT:-/tmp/gemv_mma_out}
mkdir -p "$O"
. "$(dirname "$0")/lib.sh"
kl_library_path "$D"
kl_gpu_header
"$B/deltaserve-synth" --shape 9b --out /tmp/9b.gguf > "$O/synth.log" 2>&1 &
synth_pid=$!
timeout 60 "$B/test_cuda_gemv_mma" > "$O/test.log" 2>&1
echo "test_cuda_gemv_mma rc=$? $(grep -E '^\[  (PASSED|FAILED)  \]' "$O/test.log" | tr '\n' ' ')"
grep -E "^\[  FAILED|Failure|Expected|Which is|worst|differs" "$O/test.log" | head -24
timeout 60 "$B/deltaserve-kernel-lab" --gemv-mma --reps 10 > "$O/lab.log" 2>&1; echo "lab rc=$? (${SECONDS}s)"
wait "$synth_pid"; echo "synth rc=$? (${SECONDS}s)"
bench() {  # bench NAME TIMEOUT ARGS...
  local name=$1 limit=$2
  shift 2
  if [ $((SECONDS + limit)) -gt "$LIMIT" ]; then echo "bench $name skipped (time)"; return; fi
  timeout "$limit" "$B/deltaserve-bench" -m /tmp/9b.gguf --backend cuda -p 512 -n 64 -r 2 --spec-k 3 "$@" \
    > "$O/bench_$name.log" 2>&1
  echo "bench $name rc=$? (${SECONDS}s)"
}
bench mma 50
bench nomma 50 --no-small-batch-mma
echo "==== lab"; cat "$O/lab.log"
for b in mma nomma; do
  [ -e "$O/bench_$b.log" ] && { echo "==== bench $b"; tail -6 "$O/bench_$b.log"; }
done
