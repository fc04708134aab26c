#!/bin/sh
# deploy_install_dry_run: install.sh --dry-run into a staging root prints every step and
# creates nothing; a real run into the root installs binaries, units (with --prefix
# substituted) and the settings; a second run keeps the edited settings (idempotent).
# usage: install_test.sh INSTALL_SH BIN_DIR ROOT
set -eu
installer=$1 build=$(cd "$2/.." && pwd) root=$3
fail() { echo "FAIL: $*"; exit 1; }

rm -rf "$root"
out=$(sh "$installer" --dry-run --build-dir "$build" --prefix /opt/ds --destdir "$root")
echo "$out"
[ ! -e "$root" ] || fail "--dry-run created $root"
for want in "+ install -m 0755 $build/bin/deltaserve $build/bin/deltaserve-worker $root/opt/ds/bin/" \
            "$root/etc/systemd/system/deltaserve-worker@.service" \
            "+ install -m 0640 " "$root/etc/deltaserve/deltaserve.env" \
            "not creating user"; do
  echo "$out" | grep -qF -- "$want" || fail "dry run does not mention: $want"
done

sh "$installer" --build-dir "$build" --prefix /opt/ds --destdir "$root" >/dev/null
[ -x "$root/opt/ds/bin/deltaserve-worker" ] || fail "worker binary not installed"
grep -q '^ExecStart=/opt/ds/bin/deltaserve-worker ' "$root/etc/systemd/system/deltaserve-worker@.service" ||
  fail "prefix not substituted in the worker unit"
[ -f "$root/etc/deltaserve/deltaserve.env" ] || fail "settings not installed"

echo "DELTASERVE_PORT=9999" >> "$root/etc/deltaserve/deltaserve.env"
out=$(sh "$installer" --build-dir "$build" --prefix /opt/ds --destdir "$root")
echo "$out" | grep -q "keeping existing" || fail "second run does not report the kept settings"
grep -q '^DELTASERVE_PORT=9999$' "$root/etc/deltaserve/deltaserve.env" || fail "second run overwrote the settings"
echo "OK: install.sh dry run, staged install and re-run"
