#!/bin/bash
# One-call GPU check on a lent machine (see /work/.library/device): CUDA parity tests, the whole
# server on CUDA workers against the CPU reference tokens (speculation on and off), then the
# synthetic 9B / 27B benchmarks: prefill + tg128 at several contexts, MTP draft/verify costs,
# 1 vs 2 worker processes on one GPU, batched decode and TTFT through HTTP. Short table last.
#   tools/device_check.sh BUNDLE_DIR TESTDATA_DIR OUT_DIR
# BUNDLE_DIR comes from deploy/bundle.sh (bin/, lib/, run), or is a tarball of it (e.g.
# `tar cJf b.tar.xz -C build-x bundle`); TESTDATA_DIR is the path the test
# binaries were compiled with (DS_TESTDATA_DIR): it is re-created from tests/data/*.gz here.
# SECTIONS (default "tests serve spec16 9b spec workers http 27b"; also "verify_gemv": verify 1+K and tg128 with
# --decode-gemv dp4a vs mma (VG_GEMVS, VG_KS); "lab27": the split-rows GEMVs at the 27B step's shapes, dp4a vs
# mma (with test_cuda_gemv_split first when bundled); "spec_vocab": the MTP draft row with
# --draft-vocab 0 / 65536 / 32768; "verify_profile": ncu per-kernel sums of 8 verify 1+3 steps and 8 decode steps (extra bench flags: VP_FLAGS);
# "penalties": 16 HTTP streams with presence/frequency/repetition penalties and logit_bias vs none;
# "structured": tiny fixture CPU vs CUDA vs CUDA spec-k 3 under JSON schemas, 9B HTTP constrained vs free at 64 and 1;
# "grammar": MaskBench (deltaserve-bench-grammar) in GR_SHARDS single-threaded shards at 151,936 and 248,320 tokens;
# "pooling": synthetic Qwen3-Embedding-4B / Qwen3-Reranker-0.6B served on CUDA, tools/bench_pooling.py (embed tok/s at 512-token
# inputs, 1 and 64 concurrent, per --max-batch-tokens POOL_BATCH_TOKENS; rerank 1 x 100 docs of 256 tokens p50);
# "issue12": 2 workers on one GPU with the defaults vs 1 worker at 2K/8K/16K and 32 sequences, kill -9 of rank 1
# under MPS, leftover daemon of a SIGKILLed server; "handoff_host": 2 workers on one GPU with
# the hand-off waited on the device vs the host, and the in-process decode with / without dependent launches,
# plain and under MPS; "handoff": 2 workers with
# --early-handoff on vs off, decode / prefill / 32 sequences, one GPU, two GPUs when present, MPS; "lab": the kernel lab's
# split-rows GEMV, small-batch GEMM and GDN f32-vs-tensor-core tables when the bundle has
# deltaserve-kernel-lab; "batched":
# in-process batched decode at 1/8/32/64 sequences, with and without the small-batch GEMM; "pdl":
# tg128 with the decode GEMV as a dependent launch vs without; "profile": ncu per-kernel sums of 4 decode
# steps at PROFILE_N sequences, default "1 8"; "workers_batched": 32-sequence decode through 1 vs 2 (and 2 with --decode-groups 2)
# worker processes on one GPU, plain and under MPS; "prefill": 9B prefill at 512..32K, with 27B too
# when "27b" is asked; "prefill_profile": ncu per-kernel sums of one 9B prefill step at PREFILL_PROFILE_P
# tokens, default "2048 8192"; "ttft": an 8K prompt's time to first token through HTTP at 2048- and
# 8192-token steps next to the in-process and 1-worker prefill; "gemv_stalls": ncu warp-stall,
# occupancy and memory sections of the split-rows GEMV at 1..8 tokens; "mma_stalls": ncu raw metrics of the
# tensor-core GEMV's lone launches on MMA_SHAPES, default "ffn_down qkv"; "27b_spec": 27B draft / verify 1+3 and tg128 dp4a vs mma;
# "vision": tools/device_vision.sh: vision tests, logits with images, 9B + real-shape tower bench; "kv_quality", "kv_decode":
# tools/device_kv.sh; "moe": tools/device_moe.sh: MoE op / model tests, compute-sanitizer, synthetic 35B-A3B bench vs the
# active-bytes limit and llama.cpp (MOE_SHAPE=tiny-moe: a smoke run; MOE_STEPS)) picks what runs; every step has its
# own timeout so one hang cannot eat the call.
set -u
B=$1 DATA=$2 O=$3
if [ -f "$B" ]; then  # a tarball of the bundle (binaries compress ~8x: the carried tree must stay < 64 MiB)
  mkdir -p /tmp/ds_bundle && tar xf "$B" -C /tmp/ds_bundle || exit 1
  b=$(find /tmp/ds_bundle -path '*/bin/deltaserve' | head -1)
  B=$(dirname "${b:-$(find /tmp/ds_bundle -path '*/bin/*' -type f | head -1)}")/..  # a bundle without deltaserve too
fi
SECTIONS=${SECTIONS:-tests serve spec16 9b spec workers http 27b}
export LD_LIBRARY_PATH="$B/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
mkdir -p "$O" "$DATA/reference" "$DATA/tokenizer"
for gz in $(cd tests/data && find . -name '*.gz'); do mkdir -p "$DATA/${gz%/*}"; gzip -dc "tests/data/$gz" > "$DATA/${gz%.gz}"; done
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader
date -u
SUMMARY=$O/summary.txt
: > "$SUMMARY"
note() { echo "$*" | tee -a "$SUMMARY"; }
want() { case " $SECTIONS " in *" $1 "*) return 0 ;; esac; return 1; }
bench() { timeout "$1" "$B/bin/deltaserve-bench" "${@:2}"; }

wait_listening() {  # $1 = log file; up to 120 s (a 27B load takes a while)
  for _ in $(seq 600); do grep -q "listening on" "$1" && return 0; sleep 0.2; done
  return 1
}

# Three tiny-fixture servers for the CPU-vs-CUDA checks, on ports $2, $2+1, $2+2: CPU, CUDA (f32
# prefill), CUDA with --spec-k 3 and the worker flags $3.. (e.g. "--workers 2 --devices 0,0").
# Started from this shell (not a subshell) so `wait $TRIO_PIDS` works; 0 when all three listen.
tiny_trio() {
  local tag=$1 port=$2
  shift 2
  TRIO_PIDS=""
  local i flags
  for i in 0 1 2; do
    case $i in
      0) flags=(--backend cpu --workers 1) ;;
      1) flags=(--backend cuda --workers 1 --devices 0 --prefill-precision f32) ;;
      2) flags=(--backend cuda --prefill-precision f32 --spec-k 3 "$@") ;;
    esac
    "$B/bin/deltaserve" serve --model "$DATA/tiny-qwen35-q8_0.gguf" --kv-cache-type f32 --port $((port + i)) --max-seqs 8 "${flags[@]}" \
      > "$O/serve_${tag}_$((port + i)).log" 2>&1 &
    TRIO_PIDS="$TRIO_PIDS $!"
  done
  for i in 0 1 2; do wait_listening "$O/serve_${tag}_$((port + i)).log" || return 1; done
}

# An MPS control daemon of this script's own (the runs under it share one GPU context); mps_start
# fails when this machine has none or it does not start.
mps_start() {
  command -v nvidia-cuda-mps-control > /dev/null || { note "no nvidia-cuda-mps-control on this machine"; return 1; }
  export CUDA_MPS_PIPE_DIRECTORY=/tmp/ds_mps_pipe CUDA_MPS_LOG_DIRECTORY=/tmp/ds_mps_log
  mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
  nvidia-cuda-mps-control -d && return 0
  note "MPS control daemon did not start"
  unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
  return 1
}
mps_stop() {
  echo quit | nvidia-cuda-mps-control
  unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
}

# A 9B pair of runs: prompts $2 (bench -p list; prefill and decode, -b 2048) then 32-sequence decode,
# one summary line (with how many private MPS daemons the run started). $1 = tag, then bench flags.
pair_bench() {
  local tag=$1 prompts=$2; shift 2
  bench 150 -m $M9 --backend cuda "$@" -p "$prompts" -b 2048 -n 128 -r 2 > "$O/$tag.log" 2>&1
  local rc=$?
  bench 100 -m $M9 --backend cuda "$@" -p 128 -n 64 -r 1 --parallel 32 > "$O/${tag}_b32.log" 2>&1
  note "$tag rc=$rc/$?: $(grep -E "^(${prompts//,/|}) " "$O/$tag.log" | awk '{printf "p%s pp %s tg %s; ", $1, $3, $5}')b32 $(grep -E '^128 ' "$O/${tag}_b32.log" | awk '{printf "%s tok/s", $4}') $(grep -c 'started a CUDA MPS control daemon' "$O/$tag.log") mps"
}

# kill -9 of worker rank $2 three seconds into 16 HTTP streams of 256+256 tokens on the 9B, two
# workers on GPU 0 (serve's defaults; extra serve flags after $3). $1 = tag, $3 = port. Leaves the
# server running as $kpid and its log in $O/serve_$1.log.
kill_rank_under_load() {
  local tag=$1 rank=$2 port=$3; shift 3
  "$B/bin/deltaserve" serve --model $M9 --backend cuda --workers 2 --devices 0,0 --port "$port" --max-seqs 32 "$@" \
    > "$O/serve_$tag.log" 2>&1 &
  kpid=$!
  if ! wait_listening "$O/serve_$tag.log"; then note "$tag: server did not start"; return; fi
  timeout 120 "$B/bin/deltaserve-bench-http" --port "$port" --concurrency 16 --requests 32 --prompt-tokens 256 \
    --max-tokens 256 > "$O/http_$tag.log" 2>&1 &
  local hb=$!
  sleep 3
  kill -9 "$(grep -oE "started worker rank $rank pid [0-9]+" "$O/serve_$tag.log" | tail -1 | awk '{print $NF}')"
  wait $hb
  note "$tag kill -9 rank $rank under 16 streams: $(grep -E '^\| 16 ' "$O/http_$tag.log" | awk -F'|' '{printf "requests %s failed %s", $3, $4}'); $(grep -c 'never landed' "$O/serve_$tag.log") watch releases, $(grep -c 'started a CUDA MPS control daemon' "$O/serve_$tag.log") mps"
}

if want tests; then
  echo "==== CUDA tests"
  for t in ${TESTS:-test_cuda_kernels test_cuda_matmul_gdn test_cuda_gemm_paths test_cuda_prefill_ops test_cuda_decode_ops test_cuda_gemv_split test_cuda_dependent_launch test_cuda_model test_cuda_speculation test_qwen3_cuda test_qwen35moe_cuda test_backend_ops}; do
    timeout 150 "$B/bin/$t" > "$O/$t.log" 2>&1
    note "$t rc=$? $(grep -E '^\[  (PASSED|FAILED)  \]' "$O/$t.log" | tr '\n' ' ')"
    grep -E "^\[  FAILED" "$O/$t.log" | head -10
  done
fi

if want serve; then
  echo "==== serve on CUDA workers vs the reference greedy tokens"
  serve_check() {  # $1 = workers, $2 = GPU of each worker, $3.. = extra serve flags
    local w=$1 dev=$2; shift 2
    local log="$O/serve_${w}_$(echo "$*" | tr -c 'a-z0-9' '_').log"
    "$B/bin/deltaserve" serve --model "$DATA/tiny-qwen35-q8_0.gguf" --kv-cache-type f32 --backend cuda --workers "$w" --devices "$dev" \
      --port 18080 --max-seqs 8 "$@" > "$log" 2>&1 &
    local pid=$!
    wait_listening "$log" || { note "serve workers=$w $*: did not start"; tail -5 "$log"; kill -TERM $pid; wait $pid; return; }
    local r
    r=$(timeout 60 python3 - <<'PY'
import json, urllib.request
ids = [151644,872,198,9707,0,3555,374,279,6722,315,11862,30,151645,198,151644,77091,198,151667,198]
want = [71761,93222,84543,18622,13769,1316,26973,56009,92691,146957,49892,134372,109475,94419,61040,63120,
        52497,84327,142250,60015,18929,114420,58555,65683,34079,93484,83298,83549,118799,104019,36284,67537]
def post(path, body):
    req = urllib.request.Request("http://127.0.0.1:18080" + path, json.dumps(body).encode(), {"Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(req, timeout=60))
got = post("/v1/completions", {"prompt": ids, "max_tokens": 32, "temperature": 0})["choices"][0]["text"]
ref = post("/detokenize", {"tokens": want})
ref = ref.get("prompt", ref.get("text", ""))
print("MATCH" if got == ref else "DIFFER")
PY
)
    kill -TERM $pid; wait $pid
    note "serve workers=$w devices=$dev $*: greedy32 ${r:-ERROR} (exit $?)"
  }
  # The fixture model amplifies bf16 rounding ~1e4x, so the exact-reference check runs f32 prefill.
  serve_check 1 0 --prefill-precision f32
  serve_check 2 0,0 --prefill-precision f32
  serve_check 2 0,0 --prefill-precision f32 --spec-k 3
  serve_check 1 0 --prefill-precision f32 --decode-gemv mma
  serve_check 1 0
fi

if want spec16; then
  echo "==== 16 concurrent greedy requests on CUDA workers: --spec-k 3 vs --spec-k 0, each decode GEMV"
  spec16() {  # $1 = spec k, $2 = decode GEMV; writes the 16 completions to $O/spec16_k$1_$2.json
    "$B/bin/deltaserve" serve --model "$DATA/tiny-qwen35-q8_0.gguf" --kv-cache-type f32 --backend cuda --workers 2 --devices 0,0 \
      --port 18082 --max-seqs 16 --prefill-precision f32 --spec-k "$1" --decode-gemv "$2" > "$O/serve_spec16_k$1_$2.log" 2>&1 &
    local pid=$!
    if wait_listening "$O/serve_spec16_k$1_$2.log"; then
      timeout 120 python3 - "$O/spec16_k$1_$2.json" <<'PY'
import json, random, sys, threading, urllib.request
out = [None] * 16
def run(i):
    rng = random.Random(i)
    ids = [rng.randrange(200, 150000) for _ in range(5 + 37 * i)]  # 5..560 prompt tokens
    body = {"prompt": ids, "max_tokens": 48, "temperature": 0, "ignore_eos": True}
    req = urllib.request.Request("http://127.0.0.1:18082/v1/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    out[i] = json.load(urllib.request.urlopen(req, timeout=100))["choices"][0]["text"]
threads = [threading.Thread(target=run, args=(i,)) for i in range(16)]
for t in threads: t.start()
for t in threads: t.join()
json.dump(out, open(sys.argv[1], "w"))
PY
    fi
    kill -TERM $pid; wait $pid
  }
  # Speculation must not change a server's output: compared at the same decode GEMV (the workers'
  # auto picks mma for --spec-k 3 and dp4a for 0, whose rounding differs).
  for gemv in mma dp4a; do
    spec16 0 $gemv; spec16 3 $gemv
    a=$O/spec16_k0_$gemv.json b=$O/spec16_k3_$gemv.json
    if [ -s "$a" ] && cmp -s "$a" "$b" && ! grep -q null "$a"; then
      note "spec16 $gemv: 16 concurrent greedy completions identical with --spec-k 3 and 0 (MATCH)"
    else
      note "spec16 $gemv: DIFFER (see $a / $b)"
    fi
  done
fi

M9=/tmp/9b.gguf M27=/tmp/27b.gguf
if want 9b || want verify_gemv || want prefill || want ttft || want prefill_profile || want spec || want spec_vocab || want verify_profile || want workers || want workers_batched || want handoff || want handoff_host || want issue12 || want http || want penalties || want structured || want batched || want pdl || want profile; then
  timeout 60 "$B/bin/deltaserve-synth" --shape 9b --out $M9 > "$O/synth9.log" 2>&1 || tail -3 "$O/synth9.log"
fi

if want 9b; then
  echo "==== 9B bench"
  bench 120 -m $M9 --backend cuda -p 512,2048,8192,16384 -n 128 -r 2 > "$O/bench9.log" 2>&1; note "bench9 rc=$?"
  bench 60 -m $M9 --backend cuda --bf16-weights -p 512,2048,8192 -n 8 -r 2 > "$O/bench9_bf16w.log" 2>&1; note "bench9 bf16-weights rc=$?"
  # Ablations: the round-2 decode and prefill paths switched off (each has a CudaAblations field).
  bench 60 -m $M9 --backend cuda -p 512 -n 128 -r 2 ${DECODE_OFF:---ablate device-digest,fused-decode-ops,stacked-weights} \
    > "$O/bench9_decode_off.log" 2>&1; note "bench9 decode paths off rc=$?"
  bench 60 -m $M9 --backend cuda -p 2048,8192 -n 0 -r 2 --ablate prefill-fusions \
    > "$O/bench9_prefill_off.log" 2>&1; note "bench9 prefill paths off rc=$?"
  bench 60 -m $M9 --backend cuda -p 512,8192 -n 128 -r 2 --ablate q8-split > "$O/bench9_gguf_order.log" 2>&1
  note "bench9 Q8_0 in GGUF order (no split rows) rc=$?"
fi

if want lab && [ -x "$B/bin/deltaserve-kernel-lab" ]; then
  echo "==== kernel lab: split-rows GEMV vs GGUF order, small-batch GEMM vs today's paths"
  timeout 200 "$B/bin/deltaserve-kernel-lab" --gemv-split --reps 10 > "$O/lab_gemv_split.log" 2>&1; note "lab gemv-split rc=$?"
  timeout 200 "$B/bin/deltaserve-kernel-lab" --gemm-split --reps 10 > "$O/lab_gemm_split.log" 2>&1; note "lab gemm-split rc=$?"
  # Chunked GDN layer: f32 state pass vs tensor cores (9B and 27B heads), with tc's error vs f32.
  timeout 120 "$B/bin/deltaserve-kernel-lab" --prefill-ops --reps 10 > "$O/lab_prefill_ops.log" 2>&1; note "lab prefill-ops rc=$?"
fi

if want batched; then
  echo "==== 9B batched decode in-process: N sequences per step"
  bench 200 -m $M9 --backend cuda -p 128 -n 64 -r 1 --parallel ${PARALLEL:-1,8,32,64} > "$O/batched9.log" 2>&1
  note "batched9 rc=$?"
  if [ -z "${PARALLEL:-}" ]; then
    bench 200 -m $M9 --backend cuda -p 128 -n 64 -r 1 --parallel 8,32,64 --ablate split-small \
      > "$O/batched9_nosmall.log" 2>&1; note "batched9 --ablate split-small rc=$?"
  fi
fi

if want pdl; then
  echo "==== 9B tg128: decode GEMV as a programmatic dependent launch"
  bench 60 -m $M9 --backend cuda -p 512 -n 128 -r 3 --ablate pdl > "$O/pdl_off.log" 2>&1; note "pdl off rc=$?"
  bench 60 -m $M9 --backend cuda -p 512 -n 128 -r 3 > "$O/pdl_on.log" 2>&1; note "pdl on rc=$?"
fi

if want profile && command -v ncu > /dev/null; then
  echo "==== 9B decode steps kernel by kernel (ncu, warm caches)"
  for n in ${PROFILE_N:-1 8}; do
    timeout 300 ncu --profile-from-start off --cache-control none --csv --print-units base \
      --metrics gpu__time_duration.sum "$B/bin/deltaserve-bench" -m $M9 --backend cuda -p 128 -n 4 -r 1 \
      --parallel "$n" --profile-decode --no-warmup > "$O/ncu_$n.csv" 2> "$O/ncu_$n.err"
    python3 tools/kernel_lab/ncu_summary.py "$O/ncu_$n.csv" 40 > "$O/ncu_$n.txt" 2>&1
    note "ncu 4 decode steps of $n sequences: $(tail -1 "$O/ncu_$n.txt")"
  done
fi

# Issue 10: a 1+3 verify step against a decode step, kernel by kernel (8 greedy verify steps with
# --spec-k 3 -n 0; 8 decode steps with -n 8).
if want verify_profile && command -v ncu > /dev/null; then
  echo "==== 9B verify 1+3 vs decode, kernel by kernel (ncu, warm caches)"
  for run in "verify:-n 0 --spec-k 3" "decode:-n 8"; do
    tag=${run%%:*}
    # shellcheck disable=SC2086
    timeout 300 ncu --profile-from-start off --cache-control none --csv --print-units base \
      --metrics gpu__time_duration.sum "$B/bin/deltaserve-bench" -m $M9 --backend cuda -p 512 -r 1 ${run#*:} \
      --profile-decode --no-warmup ${VP_FLAGS:-} > "$O/ncu_$tag.csv" 2> "$O/ncu_$tag.err"
    python3 tools/kernel_lab/ncu_summary.py "$O/ncu_$tag.csv" 40 > "$O/ncu_$tag.txt" 2>&1
    note "ncu 8 $tag steps: $(tail -1 "$O/ncu_$tag.txt")"
  done
fi

# Issue 10's open question: why the 4-token split-rows GEMV costs ~1.8x the 1-token one when it is
# not issue-bound (session 8). ncu's warp-stall, occupancy and memory sections of the lab's lone
# launches (gemv_q8_split_kernel only: n = 1, 2, 3, 4, 8 per shape, the 9B step's shapes in order).
# Written in session 8, not yet run.
if want gemv_stalls && command -v ncu > /dev/null && [ -x "$B/bin/deltaserve-kernel-lab" ]; then
  echo "==== split-rows GEMV stall reasons, 1 vs 2..4 tokens (ncu)"
  timeout 400 ncu --cache-control none --kernel-name regex:gemv_q8_split_kernel --launch-count 60 \
    --section WarpStateStats --section Occupancy --section MemoryWorkloadAnalysis --section LaunchStats \
    --csv --page details "$B/bin/deltaserve-kernel-lab" --gemv-split --reps 1 > "$O/ncu_gemv_stalls.csv" \
    2> "$O/ncu_gemv_stalls.err"
  note "ncu gemv stalls rc=$? ($(wc -l < "$O/ncu_gemv_stalls.csv") csv lines)"
fi

# Issue 10: where the tensor-core GEMV's extra time at 4 tokens goes (its instructions are the same
# at 1..4 tokens but for the activations' quantization). Raw ncu metrics of its lone launches on
# MMA_SHAPES (lab shape-name prefixes), one table line per launch (ncu_raw_table.py).
if want mma_stalls && command -v ncu > /dev/null && [ -x "$B/bin/deltaserve-kernel-lab" ]; then
  echo "==== tensor-core split-rows GEMV, 1 vs 4 tokens (ncu raw metrics)"
  for s in ${MMA_SHAPES:-ffn_down qkv}; do
    timeout 200 ncu --cache-control none --kernel-name regex:gemv_q8_split_mma_kernel --launch-count 24 \
      --section WarpStateStats --section SpeedOfLight --section Occupancy --section LaunchStats \
      --metrics smsp__inst_executed.sum,lts__t_sectors_srcunit_tex_op_read.sum,lts__t_requests_srcunit_tex_op_read.sum \
      --page raw --csv "$B/bin/deltaserve-kernel-lab" --gemv-split --reps 1 --shape "$s" > "$O/ncu_mma_$s.csv" \
      2> "$O/ncu_mma_$s.err"
    python3 tools/kernel_lab/ncu_raw_table.py "$O/ncu_mma_$s.csv" > "$O/ncu_mma_$s.txt" 2>&1
    note "ncu mma $s rc=$? ($(wc -l < "$O/ncu_mma_$s.txt") launches)"
  done
fi

if want prefill; then
  echo "==== 9B prefill, one sequence, 512 to 32K tokens in one step"
  bench 150 -m $M9 --backend cuda -p 512,2048,8192,16384,32768 -n 0 -r 2 > "$O/prefill9.log" 2>&1; note "prefill9 rc=$?"
  bench 100 -m $M9 --backend cuda --bf16-weights -p 512,2048,8192 -n 0 -r 2 > "$O/prefill9_bf16w.log" 2>&1
  note "prefill9 bf16 weight copy rc=$?"
fi

if want prefill_profile && command -v ncu > /dev/null; then
  echo "==== 9B prefill step kernel by kernel (ncu, warm caches)"
  for p in ${PREFILL_PROFILE_P:-2048 8192}; do
    timeout 300 ncu --profile-from-start off --cache-control none --csv --print-units base \
      --metrics gpu__time_duration.sum "$B/bin/deltaserve-bench" -m $M9 --backend cuda -p "$p" -n 0 -r 1 \
      --profile-prefill --no-warmup > "$O/ncu_prefill_$p.csv" 2> "$O/ncu_prefill_$p.err"
    python3 tools/kernel_lab/ncu_summary.py "$O/ncu_prefill_$p.csv" 40 > "$O/ncu_prefill_$p.txt" 2>&1
    note "ncu one prefill step of $p tokens: $(tail -1 "$O/ncu_prefill_$p.txt")"
  done
fi

if want spec; then
  echo "==== 9B MTP draft / verify costs"
  for k in 1 2 3 4; do
    bench 60 -m $M9 --backend cuda -p 512,4096 -n 0 -r 3 --spec-k $k > "$O/spec9_k$k.log" 2>&1; note "spec9 k=$k rc=$?"
  done
fi

if want verify_gemv; then
  # Issue 10: the 1..4-token GEMVs on int8 tensor cores (--decode-gemv mma, one instruction stream for 1..4 tokens)
  # against the dp4a GEMV: verify 1+K and the decode step (-n 128) with each, same call.
  echo "==== 9B verify 1+K and decode, --decode-gemv dp4a vs mma"
  for g in ${VG_GEMVS:-dp4a mma}; do
    for k in ${VG_KS:-1 3 4}; do
      bench 60 -m $M9 --backend cuda -p 512,4096 -n 0 -r 3 --spec-k $k --decode-gemv $g > "$O/vg_${g}_k$k.log" 2>&1
      note "vg $g k=$k rc=$?: $(grep 'device digests' "$O/vg_${g}_k$k.log" | head -1 | grep -oE 'decode [0-9.]+ ms \| verify 1\+[0-9] [0-9.]+ ms \([0-9.]+x\)')"
    done
    bench 60 -m $M9 --backend cuda -p 512,4096 -n 128 -r 2 --decode-gemv $g > "$O/vg_${g}_tg.log" 2>&1
    note "vg $g tg128 rc=$?: $(grep -E '^(512|4096) ' "$O/vg_${g}_tg.log" | awk '{printf "p%s tg %s; ", $1, $5}')"
  done
fi

if want lab27 && [ -x "$B/bin/deltaserve-kernel-lab" ]; then
  # Whether --decode-gemv auto should pick the tensor-core GEMV for wide models without speculation: the
  # 27B step's GEMVs, dp4a vs mma, per matrix and queued (the mma kernel's 17408-wide ring-2 path first
  # passes its parity test when the bundle has it).
  echo "==== kernel lab: split-rows GEMV at the 27B decode-step shapes"
  if [ -x "$B/bin/test_cuda_gemv_split" ]; then
    timeout 150 "$B/bin/test_cuda_gemv_split" > "$O/test_cuda_gemv_split.log" 2>&1
    note "test_cuda_gemv_split rc=$? $(grep -E '^\[  (PASSED|FAILED)  \]' "$O/test_cuda_gemv_split.log" | tr '\n' ' ')"
  fi
  timeout 300 "$B/bin/deltaserve-kernel-lab" --gemv-split --model 27b --reps 10 > "$O/lab_gemv_split27.log" 2>&1
  note "lab gemv-split 27b rc=$?: $(grep -E 'step n=(1|4) queued' "$O/lab_gemv_split27.log" | tr '\n' ' ')"
fi

if want spec_vocab; then
  # Issue 10: the draft row with the head cut to the first ids (--draft-vocab), K = 3.
  echo "==== 9B MTP draft / verify costs, whole vocabulary vs --draft-vocab"
  for dv in 0 65536 32768; do
    bench 60 -m $M9 --backend cuda -p 512,4096 -n 0 -r 3 --spec-k 3 --draft-vocab $dv > "$O/spec9_dv$dv.log" 2>&1
    note "spec9 k=3 draft-vocab $dv rc=$?: $(grep 'device digests' "$O/spec9_dv$dv.log" | head -1 | grep -oE 'MTP draft row [0-9.]+ ms \([0-9.]+x\)')"
  done
fi

if want workers; then
  echo "==== 9B: 1 vs 2 worker processes on one GPU"
  bench 150 -m $M9 --backend cuda --workers 1 --devices 0 -p 2048,8192,16384 -b 2048 -n 128 -r 2 > "$O/w1.log" 2>&1; note "workers1 rc=$?"
  bench 150 -m $M9 --backend cuda --workers 2 --devices 0,0 -p 2048,8192,16384 -b 2048 -n 128 -r 2 > "$O/w2.log" 2>&1; note "workers2 rc=$?"
  # With WORKERS_SEQ=1, the same with the prefill chunks one after the other (no pipelining; on one
  # GPU it cannot overlap — measured 2026-11-29: no difference).
  if [ "${WORKERS_SEQ:-0}" = 1 ]; then
    bench 150 -m $M9 --backend cuda --workers 2 --devices 0,0 -p 2048,8192,16384 -b 2048 -n 128 -r 2 \
      --pipeline-depth 1 > "$O/w2_seq.log" 2>&1; note "workers2 pipeline-depth 1 rc=$?"
  fi
  # The same two processes under CUDA MPS (one shared GPU context: no context switch per hop), when
  # this machine lets us start the control daemon.
  if mps_start; then
    bench 150 -m $M9 --backend cuda --workers 2 --devices 0,0 -p 2048,8192,16384 -b 2048 -n 128 -r 2 \
      > "$O/w2_mps.log" 2>&1; note "workers2 under MPS rc=$?"
    bench 150 -m $M9 --backend cuda --workers 1 --devices 0 -p 2048,8192,16384 -b 2048 -n 128 -r 2 \
      > "$O/w1_mps.log" 2>&1; note "workers1 under MPS rc=$?"
    mps_stop
  fi
fi

if want handoff; then
  echo "==== 9B: 2 worker processes with --early-handoff on vs off (one GPU; two GPUs when there are; MPS)"
  ho() { local tag=$1; shift; pair_bench "$tag" 2048,8192 "$@"; }
  # kill -9 of rank 0 (the stage that hands over early): rank 1 may be waiting on a ready word
  # rank 0 never sets; the LandingWatch must end that wait so recovery proceeds.
  kill_rank_under_load ho_kill 0 18084 --mps off
  kill -TERM $kpid; wait $kpid
  ho ho_w1 --workers 1 --devices 0
  ho ho_w2_on --workers 2 --devices 0,0
  ho ho_w2_off --workers 2 --devices 0,0 --early-handoff off
  ho ho_w2_on_again --workers 2 --devices 0,0
  if [ "$(nvidia-smi -L | wc -l)" -ge 2 ]; then
    ho ho_2gpu_on --workers 2 --devices 0,1
    ho ho_2gpu_off --workers 2 --devices 0,1 --early-handoff off
  fi
  if mps_start; then
    ho ho_w1_mps --workers 1 --devices 0 --busy-poll off
    ho ho_w2_on_mps --workers 2 --devices 0,0 --busy-poll off
    ho ho_w2_off_mps --workers 2 --devices 0,0 --busy-poll off --early-handoff off
    mps_stop
  fi
fi

if want handoff_host; then
  # Issue 12: is the plain pair's cost the device-side wait (stage 1's queued work blocked on
  # stage 0's copy, in another process's context) or the context switch itself? --early-handoff
  # host keeps stage 1's work off the device until the rows landed. And is the MPS worker's own
  # cost the dependent launches (in-process bench, --ablate pdl)?
  echo "==== 9B: 2 workers on one GPU, early hand-off waited on the device vs on the host"
  ho2() { local tag=$1; shift; pair_bench "$tag" 2048 "$@"; }
  inproc() {  # $1 = tag, then bench flags: one process, no workers, decode at 512
    local tag=$1; shift
    bench 60 -m $M9 --backend cuda "$@" -p 512 -n 128 -r 2 > "$O/$tag.log" 2>&1
    note "$tag rc=$?: $(grep -E '^512 ' "$O/$tag.log" | awk '{printf "tg %s", $5}')"
  }
  if [ "${HH_PLAIN:-1}" = 1 ]; then
    ho2 hh_w1 --workers 1 --devices 0
    ho2 hh_w2_on --workers 2 --devices 0,0
    ho2 hh_w2_host --workers 2 --devices 0,0 --early-handoff host
    ho2 hh_w1_again --workers 1 --devices 0
    ho2 hh_w2_host_again --workers 2 --devices 0,0 --early-handoff host
    ho2 hh_w2_on_again --workers 2 --devices 0,0
    inproc hh_inproc; inproc hh_inproc_nopdl --ablate pdl
  else  # HH_PLAIN=0: the plain single worker only (the reference), then MPS with busy polling on / off
    ho2 hh_w1 --workers 1 --devices 0
  fi
  if mps_start; then
    if [ "${HH_PLAIN:-1}" = 1 ]; then
      inproc hh_inproc_mps; inproc hh_inproc_nopdl_mps --ablate pdl
    fi
    for poll in ${HH_MPS_POLL:-off}; do
      ho2 hh_w1_mps_poll$poll --workers 1 --devices 0 --busy-poll $poll
      ho2 hh_w2_on_mps_poll$poll --workers 2 --devices 0,0 --busy-poll $poll
      ho2 hh_w2_host_mps_poll$poll --workers 2 --devices 0,0 --busy-poll $poll --early-handoff host
    done
    mps_stop
  fi
  ho2 hh_w1_last --workers 1 --devices 0
fi

if want issue12; then
  # Issue 12's Done-when with the defaults (two workers on one GPU: a private MPS daemon, busy
  # polling, early hand-off) against one plain worker; --mps off for comparison; two samples.
  echo "==== issue 12: 9B, 2 workers on one GPU (defaults) vs 1 worker"
  w12() { local tag=$1; shift; pair_bench "$tag" 2048,8192,16384 "$@"; }
  w12 i12_w1 --workers 1 --devices 0
  w12 i12_w2 --workers 2 --devices 0,0
  w12 i12_w2_mps_off --workers 2 --devices 0,0 --mps off
  w12 i12_w1_again --workers 1 --devices 0
  w12 i12_w2_again --workers 2 --devices 0,0
  # kill -9 of worker rank 1 under 16 streams (defaults: MPS), then a SIGKILLed server: the next
  # server must quit the daemon it left.
  kill_rank_under_load i12_kill 1 18085
  kill -9 $kpid; wait $kpid 2> /dev/null
  sleep 2
  note "i12 after SIGKILL of the server: $(ls -d /tmp/deltaserve-mps-* 2> /dev/null | wc -l) daemon dirs left, $(pgrep -c nvidia-cuda-mps || true) mps processes"
  "$B/bin/deltaserve" serve --model $M9 --backend cuda --workers 2 --devices 0,0 --port 18086 --max-seqs 8 \
    > "$O/serve_i12b.log" 2>&1 &
  kpid=$!
  if wait_listening "$O/serve_i12b.log"; then
    note "i12 next server: $(grep -c 'quit and removed the MPS daemon' "$O/serve_i12b.log") reaped"
  else
    note "i12 next server did not start"; tail -3 "$O/serve_i12b.log"
  fi
  kill -TERM $kpid; wait $kpid
  note "i12 after SIGTERM: $(ls -d /tmp/deltaserve-mps-* 2> /dev/null | wc -l) daemon dirs left, $(pgrep -c nvidia-cuda-mps || true) mps processes"
fi

if want workers_batched; then
  echo "==== 9B: 32-sequence decode through 1 vs 2 worker processes on one GPU (plain, then under MPS)"
  wb() { local w=$1 d=$2 tag=$3; shift 3
         bench 150 -m $M9 --backend cuda --workers "$w" --devices "$d" -p 128 -n 64 -r 1 --parallel 32 "$@" > "$O/$tag.log" 2>&1
         note "$tag rc=$?"; }
  wb 1 0 wb1; wb 2 0,0 wb2; wb 2 0,0 wb2_g2 --decode-groups 2
  if mps_start; then
    wb 1 0 wb1_mps; wb 2 0,0 wb2_mps; wb 2 0,0 wb2_g2_mps --decode-groups 2
    mps_stop
  fi
fi

if want http; then
  echo "==== 9B through HTTP: batched decode, TTFT at 8K"
  "$B/bin/deltaserve" serve --model $M9 --backend cuda --workers 1 --devices 0 --port 18081 --max-seqs 64 \
    > "$O/serve9.log" 2>&1 &
  spid=$!
  if wait_listening "$O/serve9.log"; then
    timeout 40 "$B/bin/deltaserve-bench-http" --port 18081 --concurrency 1 --requests 8 \
      --prompt-tokens 128 --max-tokens 128 > "$O/http9_c1.log" 2>&1; note "http c=1 rc=$?"
    timeout 150 "$B/bin/deltaserve-bench-http" --port 18081 --concurrency 8,32,64 --requests 64 \
      --prompt-tokens 128 --max-tokens 128 > "$O/http9.log" 2>&1; note "http batched rc=$?"
    timeout 60 "$B/bin/deltaserve-bench-http" --port 18081 --concurrency 1 --requests 4 \
      --prompt-tokens 8192 --max-tokens 2 > "$O/http9_ttft.log" 2>&1; note "http ttft8k rc=$?"
  else
    note "serve 9b did not start"; tail -5 "$O/serve9.log"
  fi
  kill -TERM $spid; wait $spid
fi

if want ttft; then
  echo "==== 9B 8K-token prompt: time to first token through HTTP vs the bare prefill, where the rest goes"
  bench 60 -m $M9 --backend cuda -p 8192 -n 0 -r 3 > "$O/ttft_inproc_1step.log" 2>&1; note "ttft in-process 1 step rc=$?"
  bench 60 -m $M9 --backend cuda -p 8192 -b 2048 -n 0 -r 3 > "$O/ttft_inproc_2048.log" 2>&1; note "ttft in-process 2048-token steps rc=$?"
  bench 90 -m $M9 --backend cuda --workers 1 --devices 0 -p 8192 -b 2048 -n 0 -r 3 > "$O/ttft_worker_2048.log" 2>&1
  note "ttft 1 worker process 2048-token steps rc=$?"
  for mbt in 2048 8192; do
    "$B/bin/deltaserve" serve --model $M9 --backend cuda --workers 1 --devices 0 --port 18083 --max-seqs 8 \
      --max-batch-tokens $mbt > "$O/serve_ttft_$mbt.log" 2>&1 &
    spid=$!
    if wait_listening "$O/serve_ttft_$mbt.log"; then
      timeout 60 "$B/bin/deltaserve-bench-http" --port 18083 --concurrency 1 --requests 6 \
        --prompt-tokens 8192 --max-tokens 2 > "$O/http_ttft_$mbt.log" 2>&1; note "http ttft8k max-batch-tokens $mbt rc=$?"
    else
      note "serve ttft $mbt did not start"
    fi
    kill -TERM $spid; wait $spid
  done
fi

if want penalties; then
  echo "==== penalties, logit_bias, min_tokens, n on CUDA workers (device digest, --spec-k 0 and 3) vs CPU workers"
  if tiny_trio pen 18084 --workers 2 --devices 0,0; then
    r=$(timeout 120 python3 - <<'PY'
import json, urllib.request
ids = [151644,872,198,9707,0,3555,374,279,6722,315,11862,30,151645,198,151644,77091,198,151667,198] * 9
cases = [{"presence_penalty": -2, "frequency_penalty": -2},
         {"presence_penalty": 1.5, "frequency_penalty": 0.5, "repetition_penalty": 1.3},
         {"repetition_penalty": 0.8, "logit_bias": {"71761": -100, "198": 7}},
         {"min_tokens": 6, "stop_token_ids": [198], "logit_bias": {"198": 100}},
         {"n": 3, "presence_penalty": 0.7}]
def post(port, body):
    req = urllib.request.Request("http://127.0.0.1:%d/v1/completions" % port, json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    d = json.load(urllib.request.urlopen(req, timeout=60))
    return [c["text"] for c in d["choices"]]
out = []
for i, c in enumerate(cases):
    body = dict(prompt=ids, max_tokens=24, temperature=0, **c)
    a, b, s = post(18084, body), post(18085, body), post(18086, body)
    # twice: the second request hits the prefix cache (the history travels to the worker)
    out.append("case%d %s" % (i, "MATCH" if a == b == s == post(18085, body) else "DIFFER"))
# echo + logprobs: prompt logprobs of a 380-token prompt (2 head passes) on CUDA (device digest,
# forced rows) vs CPU, f32 both: within 1e-3.
def echo(port):
    body = dict(prompt=ids * 2, max_tokens=2, temperature=0, echo=True, logprobs=3)
    req = urllib.request.Request("http://127.0.0.1:%d/v1/completions" % port, json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(req, timeout=60))["choices"][0]["logprobs"]["token_logprobs"]
ec, eg, es = echo(18084), echo(18085), echo(18086)
worst = max(abs(x - y) for e in (eg, es) for x, y in zip(ec[1:], e[1:]))
out.append("echo logprobs %s (max |cpu - cuda| %.2g over %d tokens)" %
           ("MATCH" if len(ec) == len(eg) == len(es) and worst < 1e-3 else "DIFFER", worst, len(ec)))
print(", ".join(out))
PY
)
    note "penalties tiny cpu vs cuda vs cuda spec-k 3: ${r:-ERROR}"
  else
    note "penalties: a tiny server did not start"
  fi
  kill -TERM $TRIO_PIDS; wait $TRIO_PIDS
  echo "==== 9B through HTTP: 16 streams with penalties and logit_bias vs without (alternated, twice each)"
  "$B/bin/deltaserve" serve --model $M9 --backend cuda --workers 1 --devices 0 --port 18083 --max-seqs 32 \
    > "$O/serve9_pen.log" 2>&1 &
  spid=$!
  if wait_listening "$O/serve9_pen.log"; then
    # Modes: off, on (all of them), light (edits on every row, tokens as off's: separates the
    # mechanism's cost from the changed text's), pf (presence + frequency), rep (repetition alone).
    pen_fields() {
      case $1 in
        on) echo '"presence_penalty":1.5,"frequency_penalty":0.5,"repetition_penalty":1.1,"logit_bias":{"100":-100,"7":5}' ;;
        light) echo '"presence_penalty":0.00001,"repetition_penalty":1.00001' ;;
        pf) echo '"presence_penalty":1.5,"frequency_penalty":0.5' ;;
        rep) echo '"repetition_penalty":1.1' ;;
      esac
    }
    timeout 60 "$B/bin/deltaserve-bench-http" --port 18083 --concurrency 16 --requests 16 --prompt-tokens 256 \
      --max-tokens 32 > /dev/null 2>&1  # warm-up
    for round in $(seq ${PEN_ROUNDS:-2}); do
      for mode in ${PEN_MODES:-off on}; do
        extra=(); [ $mode != off ] && extra=(--sampling "$(pen_fields $mode)")
        timeout 120 "$B/bin/deltaserve-bench-http" --port 18083 --concurrency 16 --requests 48 --prompt-tokens 256 \
          --max-tokens 256 "${extra[@]}" > "$O/http9_pen_${mode}_$round.log" 2>&1
        note "penalties $mode round $round rc=$?: $(grep -E '^\| 16 ' "$O/http9_pen_${mode}_$round.log" | awk -F'|' '{printf "failed %s output tok/s %s ITL %s", $4, $7, $9}')"
      done
    done
  else
    note "penalties: server did not start"; tail -5 "$O/serve9_pen.log"
  fi
  kill -TERM $spid; wait $spid
fi

if want structured; then
  echo "==== structured outputs: tiny CPU vs CUDA vs CUDA spec-k 3 under schemas; 9B HTTP constrained vs free"
  if tiny_trio st 18094 --workers 1 --devices 0; then
    r=$(timeout 180 python3 - <<'PY'
import json, urllib.request
schemas = [{"type": "object", "properties": {"name": {"type": "string", "maxLength": 12}, "n": {"type": "integer"}},
            "required": ["name", "n"], "additionalProperties": False},
           {"type": "array", "items": {"enum": ["a", "b", {"x": 1}]}, "maxItems": 5}]
def post(port, body):
    req = urllib.request.Request("http://127.0.0.1:%d/v1/chat/completions" % port, json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    d = json.load(urllib.request.urlopen(req, timeout=60))
    return d["choices"][0]["message"]["content"]
out = []
for i, sc in enumerate(schemas):
    body = dict(messages=[{"role": "user", "content": "data %d" % i}], max_tokens=120, temperature=0,
                chat_template_kwargs={"enable_thinking": False},
                response_format={"type": "json_schema", "json_schema": {"name": "t", "schema": sc}})
    a, b, s = post(18094, body), post(18095, body), post(18096, body)
    ok = a == b == s
    try:
        json.loads(a)
    except ValueError:
        ok = False
    out.append("schema%d %s" % (i, "MATCH" if ok else "DIFFER %r %r %r" % (a, b, s)))
print(", ".join(out))
PY
)
    note "structured tiny cpu vs cuda vs cuda spec-k 3: ${r:-ERROR}"
  else
    note "structured: a tiny server did not start"
  fi
  kill -TERM $TRIO_PIDS; wait $TRIO_PIDS
  echo "==== 9B through HTTP: constrained (JSON schema, regex) vs free, 64 and 1 streams (alternated)"
  "$B/bin/deltaserve" serve --model $M9 --backend cuda --workers 1 --devices 0 --port 18093 --max-seqs 64 \
    > "$O/serve9_st.log" 2>&1 &
  spid=$!
  if wait_listening "$O/serve9_st.log"; then
    # The schema cannot end inside 256 tokens (40 items at least), so every request runs its
    # max_tokens as the free ones do; the regex is a dense mask (most of the vocabulary).
    st_fields() {
      case $1 in
        json) echo '"response_format":{"type":"json_schema","json_schema":{"name":"rows","schema":{"type":"array","minItems":40,"items":{"type":"object","properties":{"id":{"type":"integer"},"name":{"type":"string","maxLength":24},"ok":{"type":"boolean"}},"required":["id","name","ok"],"additionalProperties":false}}}}' ;;
        regex) echo '"structured_outputs":{"regex":"[a-zA-Z0-9 ,.]*"}' ;;
      esac
    }
    timeout 60 "$B/bin/deltaserve-bench-http" --port 18093 --concurrency 16 --requests 16 --prompt-tokens 256 \
      --max-tokens 32 --sampling "$(st_fields json)" > /dev/null 2>&1  # warm-up (and the grammar cache)
    for round in $(seq ${ST_ROUNDS:-2}); do
      for c in ${ST_CONC:-64 1}; do
        n=$(( c == 1 ? 4 : 2 * c ))
        for mode in ${ST_MODES:-off json regex}; do
          extra=(); [ $mode != off ] && extra=(--sampling "$(st_fields $mode)")
          timeout 150 "$B/bin/deltaserve-bench-http" --port 18093 --concurrency $c --requests $n --prompt-tokens 256 \
            --max-tokens 256 "${extra[@]}" > "$O/http9_st_${mode}_${c}_$round.log" 2>&1
          note "structured $mode c=$c round $round rc=$?: $(grep -E "^\| $c " "$O/http9_st_${mode}_${c}_$round.log" | awk -F'|' '{printf "failed %s output tok/s %s ITL %s", $4, $7, $9}')"
        done
      done
    done
    grep -m3 -i 'structured\|grammar' "$O/serve9_st.log"
  else
    note "structured: server did not start"; tail -5 "$O/serve9_st.log"
  fi
  kill -TERM $spid; wait $spid
fi

if want pooling; then
  # Issue 29 on the H200: synthetic Qwen3-Embedding-4B and Qwen3-Reranker-0.6B (deltaserve-synth,
  # the tiny Qwen3 fixture's tokenizer), served on one CUDA worker; tools/bench_pooling.py.
  echo "==== embeddings (4B) and rerank (0.6B) served on CUDA"
  timeout 120 "$B/bin/deltaserve-synth" --shape qwen3-embed-4b --tokenizer-from "$DATA/tiny-qwen3-embed-q8_0.gguf" \
    --out /tmp/qwen3-embed-4b.gguf > "$O/synth_embed.log" 2>&1 || tail -3 "$O/synth_embed.log"
  timeout 60 "$B/bin/deltaserve-synth" --shape qwen3-rerank-0.6b --tokenizer-from "$DATA/tiny-qwen3-rerank-q8_0.gguf" \
    --out /tmp/qwen3-rerank-0.6b.gguf > "$O/synth_rerank.log" 2>&1 || tail -3 "$O/synth_rerank.log"
  # A config: batch tokens, "+w" for --bf16-weight-copy auto.
  pool_flags() { echo "--max-batch-tokens ${1%+w}"; case $1 in *+w) echo "--bf16-weight-copy auto" ;; esac; }
  for mbt in ${POOL_BATCH_TOKENS:-2048 16384 16384+w}; do
    log="$O/serve_embed_$mbt.log"
    "$B/bin/deltaserve" serve --model /tmp/qwen3-embed-4b.gguf --backend cuda --port 18120 --max-seqs 64 \
      --max-context 1024 $(pool_flags $mbt) > "$log" 2>&1 &
    pid=$!
    if wait_listening "$log"; then
      timeout 120 python3 tools/bench_pooling.py embed --port 18120 --tokens 512 --concurrency 1,64 --seconds 12 \
        > "$O/pool_embed_$mbt.log" 2>&1
      note "embed 4B $(pool_flags $mbt | tr '\n' ' '): $(grep -E '^\| [0-9]' "$O/pool_embed_$mbt.log" | tr '\n' ' ')"
    else
      note "embed 4B: did not start"; tail -5 "$log"
    fi
    kill -TERM $pid; wait $pid
  done
  for mbt in ${RERANK_BATCH_TOKENS:-32768 32768+w}; do
    log="$O/serve_rerank_$mbt.log"
    "$B/bin/deltaserve" serve --model /tmp/qwen3-rerank-0.6b.gguf --backend cuda --port 18121 --max-seqs 128 \
      --max-context 1024 $(pool_flags $mbt) > "$log" 2>&1 &
    pid=$!
    if wait_listening "$log"; then
      timeout 120 python3 tools/bench_pooling.py rerank --port 18121 --docs 100 --doc-tokens 256 --requests 20 \
        > "$O/pool_rerank_$mbt.log" 2>&1
      note "rerank 0.6B $(pool_flags $mbt | tr '\n' ' '): $(grep -E '^\| [0-9]' "$O/pool_rerank_$mbt.log" | tr '\n' ' ')"
    else
      note "rerank 0.6B: did not start"; tail -5 "$log"
    fi
    kill -TERM $pid; wait $pid
  done
fi

if want rerank_profile && command -v ncu > /dev/null; then
  # Where a 100-document rerank request's GPU time goes: the 0.6B reranker served under ncu
  # (every worker kernel's duration, summed by name), one warm-up request then one measured.
  echo "==== rerank 0.6B request kernel by kernel (ncu)"
  [ -f /tmp/qwen3-rerank-0.6b.gguf ] || timeout 60 "$B/bin/deltaserve-synth" --shape qwen3-rerank-0.6b \
    --tokenizer-from "$DATA/tiny-qwen3-rerank-q8_0.gguf" --out /tmp/qwen3-rerank-0.6b.gguf > /dev/null 2>&1
  log="$O/serve_rerank_ncu.log"
  timeout 400 ncu --target-processes all --cache-control none --csv --print-units base --metrics gpu__time_duration.sum \
    "$B/bin/deltaserve" serve --model /tmp/qwen3-rerank-0.6b.gguf --backend cuda --port 18122 --max-seqs 128 \
    --max-context 1024 --max-batch-tokens 32768 > "$O/ncu_rerank.csv" 2> "$log" &
  pid=$!
  if wait_listening "$log"; then
    timeout 200 python3 tools/bench_pooling.py rerank --port 18122 --docs 100 --doc-tokens 256 --requests 1 \
      > "$O/pool_rerank_ncu.log" 2>&1
    note "rerank under ncu: $(grep -E '^\| [0-9]' "$O/pool_rerank_ncu.log" | tr '\n' ' ')"
  else
    note "rerank under ncu: did not start"; tail -5 "$log"
  fi
  kill -TERM $pid; wait $pid
  python3 tools/kernel_lab/ncu_summary.py "$O/ncu_rerank.csv" 40 > "$O/ncu_rerank.txt" 2>&1
  note "ncu rerank: $(tail -1 "$O/ncu_rerank.txt")"
fi

if want kv_quality || want kv_decode; then . "$(dirname "$0")/device_kv.sh"; fi

if want grammar; then
  # MaskBench on the device host's quiet cores (a CPU benchmark: one thread per process, GR_SHARDS
  # processes side by side over disjoint schemas, added up by tools/merge_grammar_shards.py), with
  # the tokenizer's 151,936 ids and with a synthetic 248,320-token vocabulary. GR_MASKBENCH: the
  # record tarball (../shared/fixtures/jsonschema/maskbench-public.tar.xz, carried in build/).
  echo "==== grammar engine: MaskBench over all records, 151,936 and 248,320 tokens"
  GR=${GR_MASKBENCH:-build/maskbench-public.tar.xz} NS=${GR_SHARDS:-7}
  timeout 60 "$B/bin/deltaserve-synth" --shape tiny --vocab 248320 --tokenizer-from "$DATA/tiny-qwen35-q8_0.gguf" \
    --out /tmp/synth-248k.gguf > "$O/synth248.log" 2>&1 || tail -3 "$O/synth248.log"
  for v in 151936:$DATA/tiny-qwen35-q8_0.gguf 248320:/tmp/synth-248k.gguf; do
    name=${v%%:*} model=${v#*:} pids=()
    for i in $(seq 0 $((NS - 1))); do
      timeout 500 "$B/bin/deltaserve-bench-grammar" --maskbench "$GR" --model "$model" --shard $i/$NS \
        --times "$O/gr_${name}_$i.txt" > "$O/gr_${name}_$i.log" 2>&1 &
      pids+=($!)
    done
    wait "${pids[@]}"
    python3 tools/merge_grammar_shards.py "$O"/gr_${name}_*.txt > "$O/grammar_$name.log" 2>&1
    note "grammar $name: $(grep -E '^(schemas|instance|compile|mask us)' "$O/grammar_$name.log" | tr '\n' ';')"
  done
fi

if want vision; then . "$(dirname "$0")/device_vision.sh"; fi

if want moe; then . "$(dirname "$0")/device_moe.sh"; fi

if want 27b_spec; then
  # Issue 10 on 27B: draft / verify 1+3 against its decode step (auto: mma on 27B), and tg128 with each GEMV.
  echo "==== 27B MTP costs, tg128 dp4a vs mma"
  rm -f $M9
  timeout 90 "$B/bin/deltaserve-synth" --shape 27b --out $M27 > "$O/synth27.log" 2>&1 || tail -3 "$O/synth27.log"
  bench 60 -m $M27 --backend cuda -p 512 -n 0 -r 2 --spec-k 3 > "$O/spec27_k3.log" 2>&1
  note "spec27 k=3 rc=$?: $(grep 'device digests' "$O/spec27_k3.log" | head -1)"
  for g in dp4a mma; do
    bench 60 -m $M27 --backend cuda -p 512 -n 128 -r 1 --decode-gemv $g > "$O/tg27_$g.log" 2>&1
    note "27B tg128 $g rc=$?: $(grep -E '^512 ' "$O/tg27_$g.log" | awk '{printf "tg %s tok/s", $5}')"
  done
fi

if want 27b; then
  echo "==== 27B bench"
  rm -f $M9
  timeout 90 "$B/bin/deltaserve-synth" --shape 27b --out $M27 > "$O/synth27.log" 2>&1 || tail -3 "$O/synth27.log"
  bench 150 -m $M27 --backend cuda -p 512,2048,8192 -n 128 -r 1 > "$O/bench27.log" 2>&1; note "bench27 rc=$?"
  bench 60 -m $M27 --backend cuda -p 512 -n 0 -r 3 --spec-k 3 > "$O/spec27_k3.log" 2>&1; note "spec27 k=3 rc=$?"
  if want prefill; then
    bench 200 -m $M27 --backend cuda -p 16384,32768 -n 128 -r 1 > "$O/prefill27.log" 2>&1; note "prefill27 rc=$?"
  fi
fi

echo "==== summary"
cat "$SUMMARY"
[ -f "$O/lab_gemv_split.log" ] && { echo "---- lab_gemv_split"; grep -E "step|n=1 " "$O/lab_gemv_split.log"; }
[ -f "$O/lab_gemm_split.log" ] && { echo "---- lab_gemm_split"; grep -E "step" "$O/lab_gemm_split.log"; }
[ -f "$O/lab_prefill_ops.log" ] && { echo "---- lab_prefill_ops"; grep -E "gdn layer" "$O/lab_prefill_ops.log"; }
for f in batched9 batched9_nosmall wb1 wb2 wb2_g2 wb1_mps wb2_mps wb2_g2_mps; do [ -f "$O/$f.log" ] && { echo "---- $f"; tail -6 "$O/$f.log"; }; done
for f in pdl_off pdl_on; do [ -f "$O/$f.log" ] && { echo "---- $f"; tail -2 "$O/$f.log"; }; done
for f in bench9 bench9_bf16w bench9_decode_off bench9_prefill_off bench9_gguf_order prefill9 prefill9_bf16w w1 w2 w2_seq w2_mps w1_mps bench27 prefill27; do [ -f "$O/$f.log" ] && { echo "---- $f"; tail -9 "$O/$f.log"; }; done
for f in "$O"/spec9_k*.log "$O/spec27_k3.log"; do [ -f "$f" ] && { echo "---- $(basename "$f")"; tail -4 "$f"; }; done
for f in ttft_inproc_1step ttft_inproc_2048 ttft_worker_2048; do [ -f "$O/$f.log" ] && { echo "---- $f"; tail -2 "$O/$f.log"; }; done
for f in http9_c1 http9 http9_ttft http_ttft_2048 http_ttft_8192; do [ -f "$O/$f.log" ] && { echo "---- $f"; tail -6 "$O/$f.log"; }; done
for f in vision9 vision9_2048; do [ -f "$O/$f.log" ] && { echo "---- $f"; sed -n '/^vision tower/,$p' "$O/$f.log"; }; done
[ -f "$O/moe_table.txt" ] && { echo "---- moe"; cat "$O/moe_table.txt"; }
# Exit status: 1 when any test binary failed, a serve check did not MATCH, or a step timed out.
! grep -Eq 'rc=[1-9]|DIFFER|ERROR|did not start' "$SUMMARY"
