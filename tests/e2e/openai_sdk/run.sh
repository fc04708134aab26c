#!/usr/bin/env bash
# ctest openai_sdk_e2e: `deltaserve serve` (tiny model, CPU worker, with the tiny embedding and
# reranker models hosted beside it) and the official openai SDK against it (sdk_test.mjs); a
# second server runs the tiny Qwen3.5-VL fixture with its mmproj for the image cases. The SDK is
# installed by scripts/test.sh (npm ci into the build tree); where it could not be installed (no
# node, no registry) the test is skipped (exit 77).
#   run.sh DELTASERVE_BINARY MODEL_GGUF SDK_DIR
set -u
BIN=$1 MODEL=$2 SDK=$3
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if ! command -v node > /dev/null || [ ! -d "$SDK/node_modules/openai" ]; then
  echo "openai SDK not installed in $SDK: skipped"
  exit 77
fi
DATA=$(dirname "$MODEL")
PIDS=()
LOGS=()
trap 'for p in "${PIDS[@]}"; do kill -TERM "$p" 2> /dev/null; wait "$p" 2> /dev/null; done; rm -f "${LOGS[@]}"' EXIT

# start_server ARGS...: `deltaserve serve ARGS --port 0` in the background; sets PORT once it listens.
start_server() {
  local log
  log=$(mktemp)
  LOGS+=("$log")
  "$BIN" serve "$@" --port 0 > "$log" 2>&1 &
  local pid=$!
  PIDS+=("$pid")
  PORT=""
  for _ in $(seq 300); do
    PORT=$(grep -oE 'listening on http://[^ ]+:[0-9]+' "$log" | grep -oE '[0-9]+$' | head -1)
    [ -n "$PORT" ] && return 0
    kill -0 "$pid" 2> /dev/null || break
    sleep 0.1
  done
  echo "the server did not start:"; cat "$log"
  exit 1
}

start_server --model "$MODEL" --workers 1 --threads 1 --embed-model "$DATA/tiny-qwen3-embed-q8_0.gguf" \
  --rerank-model "$DATA/tiny-qwen3-rerank-q8_0.gguf"
CHAT_PORT=$PORT
# The image cases compare tokens with the reference: the exact (f32) KV cache.
start_server --model "$DATA/tiny-qwen35-vl-q8_0.gguf" --mmproj "$DATA/tiny-qwen35-vl-mmproj-f16.gguf" \
  --workers 1 --threads 1 --kv-cache-type f32
VL_PORT=$PORT
cp "$HERE/sdk_test.mjs" "$SDK/sdk_test.mjs"  # resolved against the SDK's node_modules
timeout 120 node "$SDK/sdk_test.mjs" "$CHAT_PORT" "$VL_PORT" "$DATA/reference/qwen35_vl.json"
