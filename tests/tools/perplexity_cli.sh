#!/bin/sh
# deltaserve-perplexity as a program on the small trained model: ids and text input, windows,
# save / read a base, and the exit status and message of every kind of bad input.
# usage: perplexity_cli.sh DELTASERVE_PERPLEXITY MODEL.gguf   (absolute paths; works in a temporary directory)
set -eu
PPL=$1
MODEL=$2
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
cd "$WORK"

# expect_exit STATUS PATTERN COMMAND...: COMMAND exits with STATUS and its stderr holds PATTERN.
expect_exit() {
  want=$1 pattern=$2
  shift 2
  rc=0
  "$@" > out.txt 2> err.txt || rc=$?
  if [ "$rc" -ne "$want" ] || ! grep -q -e "$pattern" err.txt; then
    echo "FAIL: $* exited $rc (want $want), stderr:" >&2
    cat err.txt >&2
    exit 1
  fi
}

printf '[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]' > ids.json
"$PPL" --model "$MODEL" --ids ids.json --ctx 6 --save-base b.bin > a.out
grep -q '"n_positions": 10, "n_windows": 2, "ctx": 6' a.out
grep -q '"type_k": "f32", "type_v": "f32"' a.out
"$PPL" --model "$MODEL" --ids ids.json --ctx 6 --kl-base b.bin > k.out
grep -q '"top1_pct": 100' k.out
grep -q 'delta ppl +0' k.out
printf 'def add(a, b):\n    return a + b\n' > t.py
"$PPL" --model "$MODEL" --file t.py > t.out
grep -q '^{"ppl": ' t.out
"$PPL" --help | grep -q 'predicted positions'

expect_exit 2 'needs a value' "$PPL" --model "$MODEL" --ids
expect_exit 2 'exactly one of' "$PPL" --model "$MODEL" --ids x --file y
expect_exit 2 'exactly one of' "$PPL" --model "$MODEL"
expect_exit 2 '\-\-model is required' "$PPL" --ids ids.json
expect_exit 2 '\-\-ctx needs an integer' "$PPL" --model "$MODEL" --ids ids.json --ctx 1
expect_exit 2 'not both' "$PPL" --model "$MODEL" --ids ids.json --save-base a --kl-base b
expect_exit 2 'unknown argument' "$PPL" --model "$MODEL" --ids ids.json --bogus
expect_exit 2 '\-\-prefill-precision must be' "$PPL" --model "$MODEL" --ids ids.json --prefill-precision f16
expect_exit 2 '\-\-kv-cache-type-v must be one of f32, bf16, f16, q8_0, fp8, q4r' "$PPL" --model "$MODEL" --ids ids.json --kv-cache-type-v q4
expect_exit 1 'cannot open ids file' "$PPL" --model "$MODEL" --ids no_such.json
printf '1 2 x' > bad.txt
expect_exit 1 "'x'" "$PPL" --model "$MODEL" --ids bad.txt
printf '1 2 999999' > big.txt
expect_exit 1 'outside the model.s vocabulary' "$PPL" --model "$MODEL" --ids big.txt
printf '5 6 7 8 9 10 11 12 13 14 15 16' > other.txt
expect_exit 1 'other token ids' "$PPL" --model "$MODEL" --ids other.txt --ctx 6 --kl-base b.bin
expect_exit 1 'windows of 6' "$PPL" --model "$MODEL" --ids ids.json --ctx 4 --kl-base b.bin
printf 'not a base file: %080d' 0 > notbase.txt
expect_exit 1 'bad magic' "$PPL" --model "$MODEL" --ids ids.json --kl-base notbase.txt
expect_exit 1 'too short for its header' "$PPL" --model "$MODEL" --ids ids.json --kl-base ids.json
expect_exit 1 'more than the model.s context' "$PPL" --model "$MODEL" --ids ids.json --ctx 16000000
expect_exit 1 'no_such.gguf' "$PPL" --model no_such.gguf --ids ids.json
echo ok
