#!/usr/bin/env bash
# The serve command: installs dependencies (idempotent), builds if needed, starts the server.
#   scripts/serve.sh                         # tiny test model on CPU workers
#   scripts/serve.sh --model F.gguf --backend cuda --workers 2 [more deltaserve serve flags]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${DELTASERVE_BUILD_DIR:-$ROOT/build}"

"$ROOT/scripts/setup.sh"
if [ ! -f "$BUILD/build.ninja" ]; then
  cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
fi
cmake --build "$BUILD" -j "$(nproc 2>/dev/null || echo 2)"
if [ "$#" -eq 0 ]; then
  set -- --model "$BUILD/testdata/tiny-qwen35-q8_0.gguf" --backend cpu --workers 2
  cat >&2 <<'HINT'
deltaserve: serving the tiny test model (random weights: its text is gibberish) on 2 CPU workers.
Talk to it once it says "listening on http://127.0.0.1:8000":
  curl -sN localhost:8000/v1/chat/completions -H 'Content-Type: application/json' \
    -d '{"messages": [{"role": "user", "content": "Hello!"}], "max_tokens": 16, "stream": true}'
Stop it with Ctrl-C.
HINT
fi
if [ ! -x "$BUILD/bin/deltaserve" ]; then
  echo "deltaserve serve: not yet available (the serving issues have not landed); built tools are in $BUILD/bin" >&2
  exit 3
fi
exec "$BUILD/bin/deltaserve" serve "$@"
