#!/bin/bash
# One device call for the int8 small-batch GEMM over split rows (gemm_q8_split_int8.cu): its parity
# tests ("correct?"), then the kernel lab's int8 vs bf16 table, each 9B matrix and a whole step's
# matrices queued, plus both kernels' errors against an f64 reference ("faster?"). Short table last.
#   tools/kernel_lab/int8_run.sh DIR   (DIR holds bin/ and lib/ from deploy/bundle.sh with
#                                       test_cuda_gemm_int8 and deltaserve-kernel-lab, carried)
set -u
D=$1
B=$D/bin
O=${OUT:-/tmp/int8_out}
mkdir -p "$O"
. "$(dirname "$0")/lib.sh"
kl_library_path "$D"
kl_gpu_header
kl_run_tests "$B" "$O" "^\[  FAILED|Failure|Expected|Which is|worst|max \|error\||differs" 30 \
  "test_cuda_gemm_int8:150:*"
timeout 200 "$B/deltaserve-kernel-lab" --gemm-int8 --reps 10 > "$O/lab.log" 2>&1; echo "lab rc=$? (${SECONDS}s)"
echo "==== lab"; cat "$O/lab.log"
