#!/bin/sh
# Installs deltaserve for systemd: binaries, unit files, the example settings, the docs and
# the `deltaserve` system user. Idempotent: re-running upgrades binaries and units and
# never touches an existing /etc/deltaserve/deltaserve.env. Does not enable or start
# anything (see docs/DEPLOYMENT.md for that).
#
# usage: deploy/install.sh [--build-dir DIR] [--prefix DIR] [--destdir ROOT] [--dry-run]
#   --build-dir  CMake build directory holding bin/deltaserve{,-worker} (default: ./build)
#   --prefix     install prefix for bin/ and share/doc/ (default: /usr/local)
#   --destdir    stage everything under ROOT (packaging, tests); skips the user and
#                `systemctl daemon-reload`
#   --dry-run    print every step, change nothing
set -eu

src=$(cd "$(dirname "$0")" && pwd)
build=./build prefix=/usr/local destdir='' dry=0
user=deltaserve

usage() { sed -n '7,13s/^# \{0,1\}//p' "$0"; }
while [ $# -gt 0 ]; do
  case $1 in
    --build-dir) build=$2; shift 2 ;;
    --prefix) prefix=$2; shift 2 ;;
    --destdir) destdir=$2; shift 2 ;;
    --dry-run) dry=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "install.sh: unknown argument $1" >&2; usage >&2; exit 2 ;;
  esac
done

# Every change goes through run: printed always, executed unless --dry-run.
run() {
  echo "+ $*"
  [ "$dry" = 1 ] || "$@"
}

install_binaries() {
  for b in deltaserve deltaserve-worker; do
    [ -x "$build/bin/$b" ] || { echo "install.sh: $build/bin/$b not found; build first (or pass --build-dir)" >&2; exit 1; }
  done
  run install -d -m 0755 "$destdir$prefix/bin"
  run install -m 0755 "$build/bin/deltaserve" "$build/bin/deltaserve-worker" "$destdir$prefix/bin/"
}

# The units name /usr/local; another prefix is substituted into the installed copies.
install_units() {
  unitdir=$destdir/etc/systemd/system
  run install -d -m 0755 "$unitdir"
  for u in deltaserve.target deltaserve-coordinator.service deltaserve-worker@.service deltaserve-pooling@.service; do
    run install -m 0644 "$src/systemd/$u" "$unitdir/$u"
    [ "$prefix" = /usr/local ] || run sed -i "s|/usr/local/|$prefix/|g" "$unitdir/$u"
  done
}

# The operator's settings survive upgrades; the example is always refreshed beside them.
install_settings() {
  etc=$destdir/etc/deltaserve
  run install -d -m 0750 "$etc"
  run install -m 0644 "$src/deltaserve.env.example" "$etc/deltaserve.env.example"
  run install -m 0644 "$src/pooling.env.example" "$etc/pooling.env.example"
  if [ -e "$etc/deltaserve.env" ]; then
    echo "  keeping existing $etc/deltaserve.env"
  else
    run install -m 0640 "$src/deltaserve.env.example" "$etc/deltaserve.env"
  fi
  # Group-readable by the service user only (it may hold the API key).
  [ -n "$destdir" ] || run chown -R "root:$user" "$etc"
}

install_docs() {
  [ -f "$src/../docs/DEPLOYMENT.md" ] || return 0  # not in every source bundle
  run install -d -m 0755 "$destdir$prefix/share/doc/deltaserve"
  run install -m 0644 "$src/../docs/DEPLOYMENT.md" "$destdir$prefix/share/doc/deltaserve/DEPLOYMENT.md"
}

# A system user without login or home; its state (CUDA cache) lives in StateDirectory=.
create_user() {
  if [ -n "$destdir" ]; then
    echo "  --destdir: not creating user $user"
  elif getent passwd "$user" >/dev/null 2>&1; then
    echo "  user $user exists"
  else
    run useradd --system --user-group --home-dir /var/lib/deltaserve --no-create-home \
      --shell /usr/sbin/nologin --comment deltaserve "$user"
  fi
}

reload_systemd() {
  # Only on a live host booted with systemd (not in a container or a staging root).
  if [ -z "$destdir" ] && [ -d /run/systemd/system ]; then run systemctl daemon-reload; fi
}

[ "$dry" = 1 ] && echo "dry run: nothing is changed"
create_user
install_binaries
install_units
install_settings
install_docs
reload_systemd
echo "done. Next: edit /etc/deltaserve/deltaserve.env, then"
echo "  systemctl enable --now deltaserve.target deltaserve-worker@0.service ... (one per GPU)"
