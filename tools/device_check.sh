#!/bin/bash
# One-call GPU check on a lent machine (see /work/.library/device): CUDA parity tests, the
# whole server on CUDA workers against the CPU reference tokens, and the 9B synthetic bench.
#   tools/device_check.sh BUNDLE_DIR TESTDATA_DIR OUT_DIR
# BUNDLE_DIR comes from deploy/bundle.sh (bin/, lib/, run); TESTDATA_DIR is the path the test
# binaries were compiled with (DS_TESTDATA_DIR): it is re-created from tests/data/*.gz here.
set -u
B=$1 DATA=$2 O=$3
export LD_LIBRARY_PATH="$B/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
mkdir -p "$O" "$DATA/reference" "$DATA/tokenizer"
for gz in $(cd tests/data && find . -name '*.gz'); do gzip -dc "tests/data/$gz" > "$DATA/${gz%.gz}"; done
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader

echo "==== CUDA tests"
for t in ${TESTS:-test_cuda_kernels test_cuda_matmul_gdn test_cuda_model}; do
  "$B/bin/$t" > "$O/$t.log" 2>&1
  echo "$t rc=$? $(grep -E '^\[  (PASSED|FAILED)  \]' "$O/$t.log" | tr '\n' ' ')"
done

echo "==== serve on CUDA workers vs the reference greedy tokens"
serve_check() {  # $1 = workers, $2 = backend, $3 = GPU of each worker
  "$B/bin/deltaserve" serve --model "$DATA/tiny-qwen35-q8_0.gguf" --backend "$2" --workers "$1" --devices "$3" \
    --port 18080 --kv-blocks 2048 --max-seqs 8 > "$O/serve_$2_$1.log" 2>&1 &
  local pid=$!
  for _ in $(seq 100); do grep -q "listening on" "$O/serve_$2_$1.log" && break; sleep 0.2; done
  python3 - "$2" "$1" <<'PY'
import json, sys, urllib.request
ids = [151644,872,198,9707,0,3555,374,279,6722,315,11862,30,151645,198,151644,77091,198,151667,198]
want = [71761,93222,84543,18622,13769,1316,26973,56009,92691,146957,49892,134372,109475,94419,61040,63120,
        52497,84327,142250,60015,18929,114420,58555,65683,34079,93484,83298,83549,118799,104019,36284,67537]
def post(path, body):
    req = urllib.request.Request("http://127.0.0.1:18080" + path, json.dumps(body).encode(), {"Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(req, timeout=60))
got = post("/v1/completions", {"prompt": ids, "max_tokens": 32, "temperature": 0})["choices"][0]["text"]
ref = post("/detokenize", {"tokens": want})
ref = ref.get("prompt", ref.get("text", ""))
print(f"backend={sys.argv[1]} workers={sys.argv[2]} greedy32 {'MATCH' if got == ref else 'DIFFER'}")
PY
  kill -TERM $pid; wait $pid; echo "serve exit $? ($(grep -c 'ready in' "$O/serve_$2_$1.log") workers were ready)"
}
serve_check 1 cuda 0
serve_check 2 cuda 0,0   # two worker processes sharing one GPU

echo "==== 9B synthetic bench"
"$B/bin/deltaserve-synth" --shape 9b --out /tmp/9b.gguf > "$O/synth.log" 2>&1 || tail -3 "$O/synth.log"
"$B/bin/deltaserve-bench" --model /tmp/9b.gguf --backend cuda --prompt 512,2048,8192 --gen 128 --repeat 2 > "$O/bench_f32.log" 2>&1
"$B/bin/deltaserve-bench" --model /tmp/9b.gguf --backend cuda --bf16-prefill --prompt 512,2048,8192 --gen 128 --repeat 2 > "$O/bench_bf16.log" 2>&1
echo "---- default (f32 prefill)"; tail -6 "$O/bench_f32.log"
echo "---- --bf16-prefill"; tail -6 "$O/bench_bf16.log"
