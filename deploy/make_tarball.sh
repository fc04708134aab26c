#!/bin/sh
# Builds the relocatable release tarball deltaserve-<version>-linux-<arch>.tar.gz from a CMake
# build tree:
#
#   deltaserve-<version>-linux-<arch>/
#     bin/     deltaserve, deltaserve-worker and the tools (RPATH $ORIGIN/../lib)
#     lib/     the shared libraries they need that a bare machine may lack (see bundle.sh)
#     deploy/  install.sh, the systemd units and deltaserve.env.example
#     docs/    DEPLOYMENT.md
#
# so that `tar xf deltaserve-*.tar.gz && ./deltaserve-*/bin/deltaserve serve ...` works with no
# LD_LIBRARY_PATH. The binaries must carry the RPATH: configure with
# -DDELTASERVE_RELOCATABLE_RPATH=ON (the default); without it `patchelf`, when installed,
# sets it on the copies.
#
# usage: deploy/make_tarball.sh [--build-dir DIR] [--out-dir DIR] [--version V]
#   --build-dir  CMake build directory holding bin/ (default: ./build)
#   --out-dir    where the tarball is written (default: the build directory)
#   --version    version in the name (default: the project version in DIR/CMakeCache.txt)
# Prints the tarball's path on its last line.
set -eu

src=$(cd "$(dirname "$0")" && pwd)
build=./build out='' version=''
usage() { sed -n '17,20s/^# \{0,1\}//p' "$0"; }
while [ $# -gt 0 ]; do
  case $1 in
    --build-dir) build=$2; shift 2 ;;
    --out-dir) out=$2; shift 2 ;;
    --version) version=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "make_tarball.sh: unknown argument $1" >&2; usage >&2; exit 2 ;;
  esac
done
build=$(cd "$build" && pwd)
[ -n "$out" ] || out=$build
mkdir -p "$out"
out=$(cd "$out" && pwd)
if [ -z "$version" ]; then
  version=$(sed -n 's/^CMAKE_PROJECT_VERSION:[A-Z]*=//p' "$build/CMakeCache.txt" 2>/dev/null | head -n 1)
  [ -n "$version" ] || { echo "make_tarball.sh: no version in $build/CMakeCache.txt; pass --version" >&2; exit 1; }
fi
name=deltaserve-$version-linux-$(uname -m)

bins=''
for b in deltaserve deltaserve-worker deltaserve-gguf-info deltaserve-tokenize deltaserve-bench deltaserve-synth; do
  [ -x "$build/bin/$b" ] && bins="$bins $build/bin/$b"
done
for b in deltaserve deltaserve-worker; do
  [ -x "$build/bin/$b" ] || { echo "make_tarball.sh: $build/bin/$b not found; build first" >&2; exit 1; }
done

stage=$(mktemp -d "${TMPDIR:-/tmp}/deltaserve-tarball-XXXXXX")
trap 'rm -rf "$stage"' EXIT
root=$stage/$name
# shellcheck disable=SC2086  # word splitting of $bins is wanted
sh "$src/bundle.sh" "$root" $bins >/dev/null
rm -f "$root/run"  # not needed: the RPATH finds lib/

has_rpath() { readelf -d "$1" 2>/dev/null | grep -E '\((RPATH|RUNPATH)\)' | grep -qF '$ORIGIN/../lib'; }
for f in "$root"/bin/*; do
  has_rpath "$f" && continue
  if command -v patchelf >/dev/null 2>&1; then
    patchelf --force-rpath --set-rpath '$ORIGIN/../lib' "$f"
  else
    echo "make_tarball.sh: $(basename "$f") has no RPATH \$ORIGIN/../lib: configure with" \
         "-DDELTASERVE_RELOCATABLE_RPATH=ON or install patchelf" >&2
    exit 1
  fi
done

mkdir -p "$root/deploy/systemd" "$root/docs"
cp "$src/install.sh" "$src/deltaserve.env.example" "$src/pooling.env.example" "$root/deploy/"
cp "$src"/systemd/* "$root/deploy/systemd/"
if [ -f "$src/../docs/DEPLOYMENT.md" ]; then cp "$src/../docs/DEPLOYMENT.md" "$root/docs/"; fi

tar -C "$stage" -czf "$out/$name.tar.gz.tmp" "$name"
mv "$out/$name.tar.gz.tmp" "$out/$name.tar.gz"
echo "$(find "$root/bin" -type f | wc -l) binaries, $(find "$root/lib" -type f | wc -l) libraries"
echo "$out/$name.tar.gz"
