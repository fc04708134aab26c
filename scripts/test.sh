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
# House rules, checked on every run: sources formatted (.clang-format), no file over 800 lines;
# the largest files and functions are printed so growth shows.
"$ROOT/scripts/check_format.sh"
(cd "$ROOT" && python3 tools/code_size_report.py)
cd "$BUILD"
ctest --output-on-failure -j "$JOBS" "$@"
