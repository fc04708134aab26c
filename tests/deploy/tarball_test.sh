#!/bin/sh
# deploy_tarball: deploy/make_tarball.sh packs this build into a relocatable tarball; extracted
# into an empty directory, its binaries run with an empty LD_LIBRARY_PATH and resolve the
# bundled libraries from their own lib/ (RPATH $ORIGIN/../lib). Exit code 77 (skipped) when
# tar, ldd or readelf are missing.
# usage: tarball_test.sh MAKE_TARBALL_SH BIN_DIR WORK_DIR FIXTURE_GGUF
set -eu
maker=$1 build=$(cd "$2/.." && pwd) work=$3 fixture=$4
fail() { echo "FAIL: $*"; exit 1; }
for tool in tar ldd readelf gzip; do
  command -v "$tool" >/dev/null 2>&1 || { echo "SKIP: $tool not installed"; exit 77; }
done

rm -rf "$work"
mkdir -p "$work/out" "$work/x"
log=$(sh "$maker" --build-dir "$build" --out-dir "$work/out" --version 0.0.0-test)
echo "$log"
tarball=$(echo "$log" | tail -n 1)
case $tarball in */deltaserve-0.0.0-test-linux-*.tar.gz) ;; *) fail "unexpected tarball name: $tarball" ;; esac
[ -f "$tarball" ] || fail "no tarball at $tarball"

tar -C "$work/x" -xzf "$tarball"
root=$(find "$work/x" -mindepth 1 -maxdepth 1 -type d)
for f in bin/deltaserve bin/deltaserve-worker bin/deltaserve-gguf-info deploy/install.sh \
         deploy/systemd/deltaserve-worker@.service deploy/deltaserve.env.example; do
  [ -e "$root/$f" ] || fail "$f missing from the tarball"
done
[ -n "$(ls "$root/lib")" ] || fail "lib/ is empty"

# Run from elsewhere, with nothing on LD_LIBRARY_PATH.
cd /
LD_LIBRARY_PATH='' "$root/bin/deltaserve-gguf-info" "$fixture" > "$work/info.out" || fail "deltaserve-gguf-info failed"
grep -q '123 tensors' "$work/info.out" || fail "deltaserve-gguf-info output: $(cat "$work/info.out")"
LD_LIBRARY_PATH='' "$root/bin/deltaserve-worker" --help > "$work/help.out" || fail "deltaserve-worker --help failed"
grep -q -- '--coordinator' "$work/help.out" || fail "deltaserve-worker --help output: $(cat "$work/help.out")"
LD_LIBRARY_PATH='' "$root/bin/deltaserve" serve --help > /dev/null || fail "deltaserve serve --help failed"

# Every bundled library the worker needs is taken from the tarball, not from the system.
for lib in "$root"/lib/*; do
  name=$(basename "$lib")
  line=$(LD_LIBRARY_PATH='' ldd "$root/bin/deltaserve-worker" | grep -F "$name " || true)
  [ -z "$line" ] && continue  # needed by another binary only
  echo "$line" | grep -qF -e "$root/lib/$name" -e "$root/bin/../lib/$name" || fail "deltaserve-worker resolves $name outside the tarball: $line"
done
echo "PASS: $tarball"
