#!/bin/sh
# Copies binaries plus the shared libraries they need that a bare machine may lack (everything
# `ldd` resolves except the C runtime and the GPU driver) into one folder, e.g. to `carry` it to
# the lent GPU machine, which has no ZeroMQ, protobuf or Boost:
#
#   deploy/bundle.sh OUT_DIR BINARY...        (e.g. deploy/bundle.sh build-x/bundle build-x/bin/deltaserve-worker)
#   OUT_DIR/run BINARY_NAME [ARGS...]         runs a bundled binary with the bundled libraries
#
# Layout: OUT_DIR/bin/<binaries>, OUT_DIR/lib/<libraries>, OUT_DIR/run. Put OUT_DIR under an
# ignored path (build*/ is) so the working tree stays small. The C/C++ runtime stays the
# machine's (set BUNDLE_LIBSTDCXX=1 to bundle libstdc++/libgcc_s too, for an older target
# image); libcuda and other driver libraries must always come from the target machine.
set -eu

if [ "$#" -lt 2 ]; then
  echo "usage: $0 OUT_DIR BINARY..." >&2
  exit 2
fi
out=$1
shift
mkdir -p "$out/bin" "$out/lib"

# Libraries never bundled: glibc's parts, the dynamic loader, the vDSO, the NVIDIA driver.
system_lib() {
  case "$1" in
    linux-vdso.so*|ld-linux*|libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|libutil.so*|libresolv.so*) return 0 ;;
    libcuda.so*|libnvidia-*|libnvcuvid.so*) return 0 ;;
    # The CUDA toolkit's own libraries (cuBLASLt for the prefill GEMM): ~0.5 GB, far over what a
    # carried tree may hold, and the GPU machine's CUDA install has them (/usr/local/cuda/lib64;
    # the run script below puts that on the search path).
    libcublas.so*|libcublasLt.so*|libcudart.so*) return 0 ;;
    libstdc++.so*|libgcc_s.so*) [ "${BUNDLE_LIBSTDCXX:-0}" = 1 ] && return 1 || return 0 ;;
  esac
  return 1
}

for bin in "$@"; do
  [ -x "$bin" ] || { echo "$0: '$bin' is not an executable" >&2; exit 1; }
  cp -f "$bin" "$out/bin/"
  # ldd lines: "libfoo.so.1 => /path/libfoo.so.1 (0x...)"; a "not found" here is fatal.
  if ldd "$bin" | grep -q "not found"; then
    echo "$0: $bin has unresolved libraries:" >&2
    ldd "$bin" | grep "not found" >&2
    exit 1
  fi
  ldd "$bin" | awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }' | while read -r name path; do
    system_lib "$name" && continue
    cp -fL "$path" "$out/lib/$name"
  done
done

cat > "$out/run" <<'RUN'
#!/bin/sh
# Runs a bundled binary against the bundled libraries (see deploy/bundle.sh).
here=$(cd "$(dirname "$0")" && pwd)
name=$1
shift
LD_LIBRARY_PATH="$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}:/usr/local/cuda/lib64" exec "$here/bin/$name" "$@"
RUN
chmod +x "$out/run"
echo "bundled $(find "$out/bin" -type f | wc -l) binaries and $(find "$out/lib" -type f | wc -l) libraries into $out ($(du -sh "$out" | cut -f1))"
