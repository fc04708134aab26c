#!/usr/bin/env bash
# The test command: installs dependencies (idempotent), builds if needed, runs the whole suite.
#   scripts/test.sh [extra ctest args]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${DELTASERVE_BUILD_DIR:-$ROOT/build}"
JOBS="$(nproc 2>/dev/null || echo 2)"

"$ROOT/scripts/setup.sh"
if [ ! -f "$BUILD/build.ninja" ]; then
  cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDELTASERVE_WERROR=ON
fi
cmake --build "$BUILD" -j "$JOBS"
# The official openai SDK for tests/e2e/openai_sdk (pinned by its package-lock.json); without
# node or the npm registry that one test is skipped.
if command -v npm > /dev/null; then
  mkdir -p "$BUILD/openai_sdk"
  cp "$ROOT/tests/e2e/openai_sdk/package.json" "$ROOT/tests/e2e/openai_sdk/package-lock.json" "$BUILD/openai_sdk/"
  (cd "$BUILD/openai_sdk" && npm ci --no-audit --no-fund --loglevel=error > /dev/null) ||
    echo "test.sh: could not install the openai SDK; openai_sdk_e2e will be skipped" >&2
fi
# House rules, checked on every run: sources formatted (.clang-format), no file over 800 lines;
# the largest files and functions are printed so growth shows.
"$ROOT/scripts/check_format.sh"
(cd "$ROOT" && python3 tools/code_size_report.py)
cd "$BUILD"
ctest --output-on-failure -j "$JOBS" "$@"
