#!/bin/bash
# Issue 13 on a 2-GPU machine (kind nvidia-h200-x2): the synthetic 9B and 27B on 1 GPU vs split over 2
# worker processes, one per GPU — prefill at 2K/8K/18K and batch-1 decode (deltaserve-bench --workers),
# decode throughput at 32 and 64 streams through `deltaserve serve`, and a kill -9 of one worker under
# load (time until it serves again, requests lost); the streams with 2 decode groups (serve's default on
# two GPUs) and with one (--decode-groups 1), the in-process batched decode at 32 / 64 sequences with
# and without --decode-groups 2, and the 9B with systemd-style workers (started separately; external_run).
# Results go to OUT_DIR/summary.txt as they come,
# so a run cut short still returns what it measured.
#   tools/device_2gpu.sh BUNDLE_DIR|BUNDLE.tar.xz OUT_DIR [MODELS]     (MODELS default "9b 27b")
#   BACKEND=cpu VOCAB_FLAG="--vocab 151936" EXT_CONCURRENCY=4 tools/device_2gpu.sh BIN_PARENT OUT MODEL.gguf
#     checks the systemd-style part locally on CPU workers
set -u
B=$1 O=$2 MODELS=${3:-9b 27b}
BACKEND=${BACKEND:-cuda}
if [ -f "$B" ]; then  # a tarball of the bundle, as for tools/device_check.sh
  mkdir -p /tmp/ds_bundle && tar xf "$B" -C /tmp/ds_bundle || exit 1
  B=$(dirname "$(find /tmp/ds_bundle -path '*/bin/deltaserve' | head -1)")/..
fi
export LD_LIBRARY_PATH="$B/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
mkdir -p "$O"
S=$O/summary.txt
note() { echo "$*" | tee -a "$S"; }
[ "$BACKEND" = cuda ] && nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader | tee -a "$S"
date -u | tee -a "$S"

wait_listening() { for _ in $(seq 900); do grep -q "listening on" "$1" && return 0; sleep 0.2; done; return 1; }

http_run() {  # $1 = model, $2 = workers, $3 = devices, $4 = tag, $5.. = extra serve flags
  local log="$O/serve_$4.log" model=$1 workers=$2 devices=$3 tag=$4
  shift 4
  "$B/bin/deltaserve" serve --model "$model" --backend cuda --workers "$workers" --devices "$devices" --port 18090 \
    --max-seqs 64 "$@" > "$log" 2>&1 &
  local pid=$!
  if wait_listening "$log"; then
    timeout 90 "$B/bin/deltaserve-bench-http" --port 18090 --concurrency 32,64 --requests 64 --prompt-tokens 128 \
      --max-tokens 128 > "$O/http_$tag.log" 2>&1
    note "http $tag: $(grep -E '^\| (32|64) ' "$O/http_$tag.log" | awk -F'|' '{printf "c=%s %s tok/s failed %s; ", $2, $7, $4}')"
  else
    note "http $tag: server did not start"
  fi
  kill -TERM $pid; wait $pid
}

kill_under_load() {  # $1 = model: 2 workers on 2 GPUs, 16 streams, worker rank 1 SIGKILLed after 3 s
  local log="$O/serve_kill.log"
  "$B/bin/deltaserve" serve --model "$1" --backend cuda --workers 2 --devices 0,1 --port 18091 --max-seqs 32 \
    > "$log" 2>&1 &
  local pid=$!
  wait_listening "$log" || { note "kill: server did not start"; kill -TERM $pid; wait $pid; return; }
  timeout 90 "$B/bin/deltaserve-bench-http" --port 18091 --concurrency 16 --requests 32 --prompt-tokens 256 \
    --max-tokens 256 > "$O/http_kill.log" 2>&1 &
  local bench=$!
  sleep 3
  local wpid
  wpid=$(grep -oE "started worker rank 1 pid [0-9]+" "$log" | tail -1 | awk '{print $NF}')
  local t0
  t0=$(date +%s.%N)
  kill -9 "$wpid"
  local before
  before=$(grep -c "\[worker 1\] layers" "$log")
  for _ in $(seq 600); do [ "$(grep -c "\[worker 1\] layers" "$log")" -gt "$before" ] && break; sleep 0.1; done
  local t1
  t1=$(date +%s.%N)
  wait $bench
  note "kill -9 worker rank 1 (pid $wpid) under 16 streams: serving again after $(python3 -c "print(round($t1 - $t0, 2))") s;" \
    "$(grep -E '^\| 16 ' "$O/http_kill.log" | awk -F'|' '{printf "requests %s failed %s", $3, $4}')"
  grep -E "\[supervisor\]|\[worker 0\].*ready|rank 1" "$log" | tail -6 >> "$S"
  kill -TERM $pid; wait $pid
}

# Systemd-style (issue 13): the coordinator with --external-workers and each worker started as its own
# process by this script, which also plays systemd's Restart=always: after a kill -9 of rank 1 under 16
# streams it starts that worker again 1 s later (RestartSec=1) and times the kill until the coordinator
# reports "recovered". BACKEND=cpu runs the same steps on CPU workers (a local check of the script).
start_external_worker() {  # $1 = rank, $2 = endpoint; prints the pid
  local dev=()
  [ "$BACKEND" = cuda ] && dev=(--device "$1")
  "$B/bin/deltaserve-worker" --coordinator "$2" --rank "$1" --backend "$BACKEND" "${dev[@]}" >> "$O/worker_ext_$1.log" 2>&1 &
  echo $!
}

external_run() {  # $1 = model, $2 = tag
  local log="$O/serve_ext_$2.log" ep="ipc:///tmp/ds_ext_$$.ctl"
  "$B/bin/deltaserve" serve --model "$1" --backend "$BACKEND" --workers 2 --external-workers --control-endpoint "$ep" \
    --port 18092 --max-seqs 64 > "$log" 2>&1 &
  local pid=$! w0 w1
  w0=$(start_external_worker 0 "$ep")
  w1=$(start_external_worker 1 "$ep")
  if ! wait_listening "$log"; then
    note "external $2: server did not start"; kill -TERM $pid $w0 $w1; wait $pid; return
  fi
  timeout 90 "$B/bin/deltaserve-bench-http" --port 18092 --concurrency ${EXT_CONCURRENCY:-32,64} --requests 64 \
    --prompt-tokens 128 --max-tokens 128 ${VOCAB_FLAG:-} > "$O/http_ext_$2.log" 2>&1
  note "external workers $2: $(grep -E '^\| [0-9]+ ' "$O/http_ext_$2.log" | awk -F'|' '{printf "c=%s %s tok/s failed %s; ", $2, $7, $4}')"
  timeout 90 "$B/bin/deltaserve-bench-http" --port 18092 --concurrency 16 --requests 32 --prompt-tokens 256 \
    --max-tokens 256 ${VOCAB_FLAG:-} > "$O/http_ext_kill_$2.log" 2>&1 &
  local bench=$! before t0 t1
  sleep 3
  before=$(grep -c "recovered, epoch" "$log")
  t0=$(date +%s.%N)
  kill -9 "$w1"
  sleep 1
  w1=$(start_external_worker 1 "$ep")
  for _ in $(seq 600); do [ "$(grep -c "recovered, epoch" "$log")" -gt "$before" ] && break; sleep 0.1; done
  t1=$(date +%s.%N)
  wait $bench
  note "external $2: kill -9 of worker rank 1 under 16 streams, restarted 1 s later: recovered after" \
    "$(python3 -c "print(round($t1 - $t0, 2))") s; $(grep -E '^\| 16 ' "$O/http_ext_kill_$2.log" | awk -F'|' '{printf "requests %s failed %s", $3, $4}')"
  kill -TERM $pid; wait $pid
  kill -TERM $w0 $w1 2> /dev/null; wait $w0 $w1 2> /dev/null
}

if [ "$BACKEND" = cpu ]; then  # local check: the fixture model on CPU workers, the systemd-style run only
  external_run "$MODELS" cpu
  exit 0
fi

for m in $MODELS; do
  F=/tmp/$m.gguf
  timeout 60 "$B/bin/deltaserve-synth" --shape "$m" --out "$F" > "$O/synth_$m.log" 2>&1 || { note "synth $m failed"; continue; }
  for w in "1 0" "2 0,1"; do
    set -- $w
    timeout 120 "$B/bin/deltaserve-bench" -m "$F" --backend cuda --workers "$1" --devices "$2" -p 2048,8192,18432 \
      -b 2048 -n 64 -r 1 > "$O/bench_${m}_w$1.log" 2>&1
    note "bench $m workers=$1 devices=$2 rc=$?"
    tail -3 "$O/bench_${m}_w$1.log" | tee -a "$S"
  done
  for w in "1 0 1" "2 0,1 1" "2 0,1 2"; do  # batched decode in-process: workers, devices, decode groups
    set -- $w
    timeout 120 "$B/bin/deltaserve-bench" -m "$F" --backend cuda --workers "$1" --devices "$2" --decode-groups "$3" \
      -p 128 -n 64 -r 1 --parallel 32,64 > "$O/batched_${m}_w$1_g$3.log" 2>&1
    note "batched $m workers=$1 decode-groups=$3 rc=$?: $(grep -E '^128 ' "$O/batched_${m}_w$1_g$3.log" | awk '{printf "%s seqs %s tok/s; ", $2, $4}')"
  done
  http_run "$F" 1 0 "${m}_1gpu"
  http_run "$F" 2 0,1 "${m}_2gpu"  # decode groups auto: 2
  http_run "$F" 2 0,1 "${m}_2gpu_g1" --decode-groups 1
  [ "$m" = 9b ] && kill_under_load "$F"
  [ "$m" = 9b ] && external_run "$F" 9b
  rm -f "$F"
done
