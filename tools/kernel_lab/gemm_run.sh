#!/bin/bash
# One device call for the prefill GEMM (issue 9): the GEMM path parity tests, the matmul and bf16
# model tests, the kernel lab's GEMM path comparison, then the 9B synthetic model with the default
# (cuBLASLt), with persistent bf16 weights, and with the mma.sync kernel. Short table last; the
# later benches are skipped when the call's time (LIMIT seconds) would run out.
#   tools/kernel_lab/gemm_run.sh DIR [LIMIT]   (DIR holds bin/ and lib/ from deploy/bundle.sh, carried)
# cuBLASLt is not bundled (deploy/bundle.sh): it comes from the machine's CUDA install.
set -u
D=$1
LIMIT=${2:-230}
B=$D/bin
O=${OUT:-/tmp/gemm_out}
mkdir -p "$O"
. "$(dirname "$0")/lib.sh"
kl_prepare "$D" /work/main/build-cuda/testdata
# The 9B file is written on the CPU while the GPU tests run.
"$B/deltaserve-synth" --shape 9b --out /tmp/9b.gguf > "$O/synth.log" 2>&1 &
synth_pid=$!
kl_run_tests "$B" "$O" "^\[  FAILED|Failure|Expected|Which is|worst|typical|beyond" 20 \
  "test_cuda_gemm_paths:30:*" "test_cuda_matmul_gdn:30:CudaMatmul*" "test_cuda_model:50:CudaModelBf16*"
timeout 45 "$B/deltaserve-kernel-lab" --gemm-paths --reps 10 > "$O/lab.log" 2>&1; echo "lab rc=$?"
wait "$synth_pid"; echo "synth rc=$?"
bench() {  # bench NAME TIMEOUT ARGS...
  local name=$1 limit=$2
  shift 2
  if [ $((SECONDS + limit)) -gt "$LIMIT" ]; then echo "bench $name skipped (time)"; return; fi
  timeout "$limit" "$B/deltaserve-bench" --model /tmp/9b.gguf --backend cuda --gen 8 "$@" > "$O/bench_$name.log" 2>&1
  echo "bench $name rc=$? (${SECONDS}s)"
}
bench cublas 55 --prompt 512,2048,8192 --repeat 2
bench bf16w 45 --prompt 512,2048,8192 --repeat 2 --bf16-weights
bench mma 35 --prompt 512,2048,8192 --repeat 1 --ablate cublaslt
echo "==== lab"; grep -E "gemm path" "$O/lab.log"
for b in cublas bf16w mma; do
  [ -e "$O/bench_$b.log" ] && { echo "==== bench $b"; tail -5 "$O/bench_$b.log"; }
done
