#!/bin/bash
# One device call for issue 9 round 2 (GDN prep v3, Q8_0 -> bf16 dequant v2, fused prefill
# SwiGLU + down projection, GDN head L2 norms in one launch): their parity tests, the bf16 model bound, the kernel lab's side by
# side (--prefill-ops), then the 9B synthetic model with everything new on (default) and off.
# Later benches are skipped when the call's time (LIMIT seconds) would run out.
#   tools/kernel_lab/prefill2_run.sh DIR [LIMIT]   (DIR: bin/ and lib/ from deploy/bundle.sh, carried)
# If a parity test fails, the bench lines say which switch turns that path off (GDN prep v3 and
# dequant v2 are no longer switchable: v2 / v1 remain only as their shape fallbacks):
#   fusions     -> --ablate prefill-fusions (CudaAblations::prefill_fusions = false: SwiGLU +
#                  down projection, GDN head L2 norms)
set -u
D=$1
LIMIT=${2:-280}
B=$D/bin
O=${OUT:-/tmp/pf2_out}
mkdir -p "$O"
start=$(date +%s)
left() { echo $((LIMIT - ($(date +%s) - start))); }
. "$(dirname "$0")/lib.sh"
kl_prepare "$D" /work/main/build-cuda/testdata
"$B/deltaserve-synth" --shape 9b --out /tmp/9b.gguf > "$O/synth.log" 2>&1 &
synth_pid=$!
kl_run_tests "$B" "$O" "^\[  FAILED|Failure|Expected|Which is|first mismatch|\[ gdn prep" 24 \
  "test_cuda_prefill_ops:60:*" "test_cuda_matmul_gdn:40:*CudaGdnChunked*" "test_cuda_gemm_paths:40:*" \
  "test_cuda_model:60:CudaModelBf16*"
timeout 60 "$B/deltaserve-kernel-lab" --prefill-ops --reps 10 > "$O/lab.log" 2>&1; echo "lab rc=$?"
wait "$synth_pid"; echo "synth rc=$?"
bench() {  # name, seconds it may take, flags...
  local name=$1 need=$2; shift 2
  if [ "$(left)" -lt "$need" ]; then echo "bench $name skipped (time)"; return; fi
  timeout "$need" "$B/deltaserve-bench" --model /tmp/9b.gguf --backend cuda --gen 0 "$@" > "$O/bench_$name.log" 2>&1
  echo "bench $name rc=$?"
}
bench new_default 75 --prompt 2048,8192,16384 --repeat 2
bench all_off 60 --prompt 2048,8192,16384 --repeat 1 --ablate prefill-fusions
bench b2048 40 --prompt 8192 --batch 2048 --repeat 2
echo "==== lab"; cat "$O/lab.log"
for f in new_default all_off b2048; do
  [ -e "$O/bench_$f.log" ] && { echo "==== bench $f"; tail -5 "$O/bench_$f.log"; }
done
