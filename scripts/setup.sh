#!/usr/bin/env bash
# Installs every Debian package deltaserve needs to build and test.
# Idempotent; run as root (or with sudo) on Debian 12.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build pkg-config git gzip ca-certificates
  # protobuf contract and ZeroMQ transport
  libprotobuf-dev protobuf-compiler libzmq3-dev cppzmq-dev
  # HTTP server, options
  libboost-dev
  # JSON, tokenizer regexes
  rapidjson-dev libpcre2-dev
  # image input (issue 31): PNG, JPEG (libjpeg-turbo), WebP and GIF decoders
  libpng-dev libjpeg62-turbo-dev libwebp-dev libgif-dev
  # https:// image URLs (issue 31): OpenSSL for Asio's TLS stream (certificates verified against
  # ca-certificates, listed above)
  libssl-dev
  # tests and fuzzing (libFuzzer ships with clang's runtime); the format check; the size report
  libgtest-dev libgmock-dev clang libclang-rt-14-dev clang-format python3
  # an independent JSON Schema validator for the structured-output end-to-end test
  python3-jsonschema
  # systemd-analyze (unit checks); curl for the demo
  systemd curl
)

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -eq 0 ]; then
  echo "setup: all ${#PACKAGES[@]} packages already installed"
  exit 0
fi
echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update
$SUDO apt-get install -y --no-install-recommends "${missing[@]}"
