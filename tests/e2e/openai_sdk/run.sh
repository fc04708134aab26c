#!/usr/bin/env bash
# ctest openai_sdk_e2e: `deltaserve serve` (tiny model, CPU worker, with the tiny embedding and
# reranker models hosted beside it) and the official openai SDK against it (sdk_test.mjs). The SDK is installed by scripts/test.sh (npm ci into the build
# tree); where it could not be installed (no node, no registry) the test is skipped (exit 77).
#   run.sh DELTASERVE_BINARY MODEL_GGUF SDK_DIR
set -u
BIN=$1 MODEL=$2 SDK=$3
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if ! command -v node > /dev/null || [ ! -d "$SDK/node_modules/openai" ]; then
  echo "openai SDK not installed in $SDK: skipped"
  exit 77
fi
LOG=$(mktemp)
DATA=$(dirname "$MODEL")
"$BIN" serve --model "$MODEL" --workers 1 --port 0 --threads 1 --embed-model "$DATA/tiny-qwen3-embed-q8_0.gguf" \
  --rerank-model "$DATA/tiny-qwen3-rerank-q8_0.gguf" > "$LOG" 2>&1 &
PID=$!
trap 'kill -TERM $PID 2> /dev/null; wait $PID 2> /dev/null; rm -f "$LOG"' EXIT
PORT=""
for _ in $(seq 300); do
  PORT=$(grep -oE 'listening on http://[^ ]+:[0-9]+' "$LOG" | grep -oE '[0-9]+$' | head -1)
  [ -n "$PORT" ] && break
  kill -0 $PID 2> /dev/null || break
  sleep 0.1
done
if [ -z "$PORT" ]; then
  echo "the server did not start:"; cat "$LOG"
  exit 1
fi
cp "$HERE/sdk_test.mjs" "$SDK/sdk_test.mjs"  # resolved against the SDK's node_modules
timeout 120 node "$SDK/sdk_test.mjs" "$PORT"
