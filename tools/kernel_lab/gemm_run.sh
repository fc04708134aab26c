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
lt_dir=""
for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib; do
  [ -e "$d/libcublasLt.so.13" ] && lt_dir=$d && break
done
if [ -z "$lt_dir" ]; then  # the pip wheel of the image (nvidia-cublas), as a last resort
  lt_dir=$(dirname "$(find / -xdev -name 'libcublasLt.so.13' 2>/dev/null | head -1)")
fi
echo "libcublasLt from: ${lt_dir:-NOT FOUND}"
export LD_LIBRARY_PATH="$PWD/$D/lib:$lt_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
TD=/work/main/build-cuda/testdata
if [ ! -e "$TD" ]; then
  mkdir -p "$TD/reference" "$TD/tokenizer"
  for gz in $(cd tests/data && find . -name '*.gz'); do gzip -dc "tests/data/$gz" > "$TD/${gz%.gz}"; done
fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
date -u
# The 9B file is written on the CPU while the GPU tests run.
"$B/deltaserve-synth" --shape 9b --out /tmp/9b.gguf > "$O/synth.log" 2>&1 &
synth_pid=$!
for t in "test_cuda_gemm_paths:30:*" "test_cuda_matmul_gdn:30:CudaMatmul*" "test_cuda_model:50:CudaModelBf16*"; do
  IFS=: read -r name limit filter <<< "$t"
  timeout "$limit" "$B/$name" --gtest_filter="$filter" > "$O/$name.log" 2>&1
  echo "$name rc=$? $(grep -E '^\[  (PASSED|FAILED)  \]' "$O/$name.log" | tr '\n' ' ')"
  grep -E "^\[  FAILED|Failure|Expected|Which is|worst|typical|beyond" "$O/$name.log" | head -20
done
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
bench mma 35 --prompt 512,2048,8192 --repeat 1 --prefill-gemm mma
echo "==== lab"; grep -E "gemm path" "$O/lab.log"
for b in cublas bf16w mma; do
  [ -e "$O/bench_$b.log" ] && { echo "==== bench $b"; tail -5 "$O/bench_$b.log"; }
done
