#!/bin/bash
# Before/after on one GPU machine, in one call: the same benchmark commands through two bundles
# (deploy/bundle.sh output, or tarballs of it), interleaved before/after so drift hits both, and
# the CUDA logits of both bit for bit (tiny fixture and the synthetic 9B, several chunkings: the
# decode GEMV, the small multi-token products and prefill). A table last.
#   tools/device_before_after.sh BEFORE AFTER TESTDATA_DIR OUT_DIR
# SECTIONS (default "logits 9b batched verify 27b"; also "batched27", "verify27": the 27B batched decode and verify 1+3); SYNTH: the bundle whose deltaserve-synth
# makes the models (default AFTER).
set -u
unpack() {  # $1 = bundle dir or tarball, $2 = scratch dir; prints the bundle dir
  if [ -f "$1" ]; then
    mkdir -p "$2" && tar xf "$1" -C "$2" || exit 1
    dirname "$(dirname "$(find "$2" -path '*/bin/deltaserve-bench' | head -1)")"
  else
    echo "$1"
  fi
}
A=$(unpack "$1" /tmp/ds_before) B=$(unpack "$2" /tmp/ds_after) DATA=$3 OUT_DIR=$4
O=/tmp/ds_before_after  # logs; OUT_DIR gets the table and one tarball of them (at most 8 files come back)
SECTIONS=${SECTIONS:-logits 9b batched verify 27b}
want() { case " $SECTIONS " in *" $1 "*) return 0 ;; esac; return 1; }
mkdir -p "$O" "$OUT_DIR" "$DATA/reference" "$DATA/tokenizer"
for gz in $(cd tests/data && find . -name '*.gz'); do gzip -dc "tests/data/$gz" > "$DATA/${gz%.gz}"; done
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; date -u
T=$O/table.txt
: > "$T"
run() {  # $1 = bundle dir, $2 = binary, rest = args
  local dir=$1 bin=$2; shift 2
  LD_LIBRARY_PATH="$dir/lib:/usr/local/cuda/lib64" "$dir/bin/$bin" "$@"
}
M9=/tmp/ds_9b.gguf M27=/tmp/ds_27b.gguf
SYNTH=${SYNTH:-$B}
if want 9b || want batched || want verify || want logits; then
  [ -f $M9 ] || timeout 90 bash -c "LD_LIBRARY_PATH=$SYNTH/lib $SYNTH/bin/deltaserve-synth --shape 9b --out $M9" > "$O/synth9.log" 2>&1
fi

if want logits; then
  IDS=$(python3 -c "print(','.join(str((i*7919)%150000+10) for i in range(96)))")
  for model in "$DATA/tiny-qwen35-q8_0.gguf" $M9; do
    for chunk in ${CHUNKS:-1 5 17 96}; do
      for side in before after; do
        dir=$A; [ $side = after ] && dir=$B
        timeout 120 env LD_LIBRARY_PATH="$dir/lib:/usr/local/cuda/lib64" "$dir/bin/deltaserve-logits" --model "$model" \
          --backend cuda --ids "$IDS" --all-positions --mtp --chunk $chunk --out "/tmp/l_$side.f32" > /dev/null 2> "$O/logits_$side.err"
      done
      same=DIFFER; cmp -s /tmp/l_before.f32 /tmp/l_after.f32 && same=identical
      echo "| logits $(basename "$model") chunk $chunk | $(md5sum < /tmp/l_before.f32 | cut -c1-8) | $(md5sum < /tmp/l_after.f32 | cut -c1-8) | $same |" | tee -a "$T"
    done
  done
fi

# The figure lines of deltaserve-bench's table: "| name | value ..." rows, kept per side.
bench_pair() {  # $1 = tag, $2 = timeout, rest = bench args
  local tag=$1 to=$2; shift 2
  for round in $(seq "${ROUNDS:-2}"); do
    for side in before after; do
      dir=$A; [ $side = after ] && dir=$B
      timeout "$to" env LD_LIBRARY_PATH="$dir/lib:/usr/local/cuda/lib64" "$dir/bin/deltaserve-bench" "$@" \
        > "$O/${tag}_${side}_$round.log" 2>&1
      echo "$tag $side round $round rc=$?"
    done
  done
}
if want 9b; then bench_pair 9b 150 -m $M9 --backend cuda -p 512,2048,8192,16384 -n 128 -r 2; fi
if want batched; then bench_pair batched 150 -m $M9 --backend cuda -p 128 -n 64 -r 1 --parallel 8,32,64; fi
if want verify; then bench_pair verify 120 -m $M9 --backend cuda -p 512 -n 0 -r 3 --spec-k 3; fi
if want 27b || want batched27 || want verify27; then
  [ -f $M27 ] || timeout 120 bash -c "LD_LIBRARY_PATH=$SYNTH/lib $SYNTH/bin/deltaserve-synth --shape 27b --out $M27" > "$O/synth27.log" 2>&1
fi
if want 27b; then bench_pair 27b 240 -m $M27 --backend cuda -p 512,2048,8192,16384 -n 128 -r 1; fi
if want batched27; then bench_pair batched27 200 -m $M27 --backend cuda -p 128 -n 64 -r 1 --parallel 8,32,64; fi
if want verify27; then bench_pair verify27 150 -m $M27 --backend cuda -p 512 -n 0 -r 3 --spec-k 3; fi
echo "==== table"
cat "$T"
# The bench tables (the lines after each header), before and after, round by round.
for f in "$O"/*_before_1.log; do
  [ -f "$f" ] || continue
  tag=$(basename "$f" _before_1.log)
  for r in before_1 after_1 before_2 after_2; do
    [ -f "$O/${tag}_$r.log" ] || continue
    echo "---- $tag $r"
    grep -vE "^(model|backend|per |\[|$)" "$O/${tag}_$r.log" | tail -n 14
  done
done
cp "$T" "$OUT_DIR/"
tar czf "$OUT_DIR/before_after_logs.tgz" -C "$O" .
