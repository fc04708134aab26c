# Shared steps of the kernel lab's one-call device scripts (gemm_run.sh, prefill_run.sh,
# prefill2_run.sh, device_run.sh). Sourced, not run:
#   . "$(dirname "$0")/lib.sh"
# Every function prints what it did, so a device call's output says where a run went wrong.

# kl_testdata TD: the test binaries read testdata from the absolute path baked in at build time;
# re-creates it from the tracked tests/data/*.gz (run from the repository root) when the fixture
# model is missing there, so the testdata need not travel with the bundle.
kl_testdata() {
  local td=$1
  [ -e "$td/tiny-qwen35-q8_0.gguf" ] && return 0
  mkdir -p "$td/reference" "$td/tokenizer"  # tokenizer/ may hold no .gz, but tests expect it
  (cd tests/data && find . -name '*.gz' | while read -r f; do
    mkdir -p "$td/$(dirname "$f")" && gzip -dc "$f" > "$td/${f%.gz}"
  done)
}

# kl_cublaslt_dir: the folder of the machine's libcublasLt.so.13 (not bundled by
# deploy/bundle.sh), from the CUDA install or, as a last resort, the image's pip wheel
# (nvidia-cublas); empty when there is none.
kl_cublaslt_dir() {
  local d
  for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib; do
    [ -e "$d/libcublasLt.so.13" ] && { echo "$d"; return; }
  done
  local found
  found=$(find / -xdev -name 'libcublasLt.so.13' 2>/dev/null | head -1)
  [ -n "$found" ] && dirname "$found"
}

# kl_library_path BUNDLE: puts the bundle's lib/ and cuBLASLt's folder first on LD_LIBRARY_PATH.
kl_library_path() {
  local lt_dir
  lt_dir=$(kl_cublaslt_dir)
  echo "libcublasLt from: ${lt_dir:-NOT FOUND}"
  export LD_LIBRARY_PATH="$PWD/$1/lib${lt_dir:+:$lt_dir}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
}

# kl_gpu_header: which GPU, driver and clocks, and when (for the figures' provenance).
kl_gpu_header() {
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
  date -u
}

# kl_run_tests BIN OUT DETAIL LINES NAME:SECONDS[:FILTER]...: runs each gtest binary BIN/NAME
# under a time limit (FILTER: a --gtest_filter, default all), logs to OUT/NAME.log and prints
# its rc and PASSED / FAILED lines plus at most LINES log lines matching the regex DETAIL.
kl_run_tests() {
  local bin=$1 out=$2 detail=$3 lines=$4 spec name limit filter
  shift 4
  for spec in "$@"; do
    IFS=: read -r name limit filter <<< "$spec"
    timeout "$limit" "$bin/$name" --gtest_filter="${filter:-*}" > "$out/$name.log" 2>&1
    echo "$name rc=$? $(grep -E '^\[  (PASSED|FAILED)  \]' "$out/$name.log" | tr '\n' ' ')"
    grep -E "$detail" "$out/$name.log" | head -"$lines"
  done
}

# kl_prepare BUNDLE TD: the usual start of a device call: library path, testdata in TD, header.
kl_prepare() {
  kl_library_path "$1"
  kl_testdata "$2"
  kl_gpu_header
}
