#!/bin/sh
# deploy_units_verify: copies deploy/systemd/* to OUT_DIR with ExecStart= pointing at this
# build's binaries and runs `systemd-analyze verify` on them. systemd-analyze only warns
# about unknown keys or unparsable values and still exits 0, so any output fails the test.
# Works offline: no running systemd (PID 1) or D-Bus is needed, root or not.
# usage: verify_units.sh DEPLOY_DIR BIN_DIR OUT_DIR      exit 77 = skipped
set -eu
deploy=$1 bin=$(cd "$2" && pwd) out=$3

if ! command -v systemd-analyze >/dev/null 2>&1; then
  echo "SKIP: systemd-analyze not found (install systemd to verify the units)"
  exit 77
fi
for b in deltaserve deltaserve-worker; do
  [ -x "$bin/$b" ] || { echo "FAIL: $bin/$b not built (ExecStart= must name an executable)"; exit 1; }
done

rm -rf "$out" && mkdir -p "$out"
cp "$deploy"/systemd/deltaserve.target "$deploy"/systemd/*.service "$out"/
sed -i "s|/usr/local/bin/|$bin/|g" "$out"/*.service
# An instance as systemd would create it (checks %i in the template), next to the template.
cp "$out/deltaserve-worker@.service" "$out/deltaserve-worker@0.service"
cp "$out/deltaserve-pooling@.service" "$out/deltaserve-pooling@embed.service"

cd "$out"
status=0
log=$(systemd-analyze verify --man=no deltaserve.target deltaserve-coordinator.service \
        deltaserve-worker@.service deltaserve-worker@0.service deltaserve-pooling@.service \
        deltaserve-pooling@embed.service 2>&1) || status=$?
if [ "$status" -ne 0 ] || [ -n "$log" ]; then
  echo "FAIL: systemd-analyze verify (exit $status):"
  echo "$log"
  exit 1
fi

# Deployment rules that verify cannot know about.
fail() { echo "FAIL: $*"; exit 1; }
grep -Eq '^(Requires|BindsTo|Requisite)=' deltaserve-coordinator.service &&
  fail "the coordinator must only Want= the workers (restarting it must not restart them)"
grep -q '^Environment=CUDA_VISIBLE_DEVICES=%i$' deltaserve-worker@.service || fail "worker: CUDA_VISIBLE_DEVICES=%i"
for u in deltaserve-coordinator.service deltaserve-worker@.service; do
  grep -q '^Type=notify$' "$u" || fail "$u: Type=notify"
  grep -q '^RuntimeDirectoryPreserve=yes$' "$u" || fail "$u: RuntimeDirectoryPreserve=yes"
  grep -q '^PartOf=deltaserve.target$' "$u" || fail "$u: PartOf=deltaserve.target"
done
grep -q '^WatchdogSec=' deltaserve-worker@.service || fail "worker: WatchdogSec="
grep -q '^Type=notify$' deltaserve-pooling@.service || fail "pooling: Type=notify"
grep -q -- '--mode %i ' deltaserve-pooling@.service || fail "pooling: the instance names the mode"
grep -q '^PrivateDevices=' deltaserve-pooling@.service && fail "pooling: its workers need the GPUs (no PrivateDevices=)"
echo "OK: units verified ($(systemd-analyze --version | head -n 1))"
