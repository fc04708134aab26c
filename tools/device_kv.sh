# SECTIONS=kv_quality and kv_decode of tools/device_check.sh (sourced from it: uses its B, DATA, O, M9,
# SUMMARY, want, note and bench), moved here unchanged:
# - kv_quality: each KV cache type's KL / top-1 / delta ppl on small-qwen35, CPU and CUDA, against the
#   CPU f32 base (tools/kv_quality_table.py prints the table into the summary);
# - kv_decode: 9B decode at 512 / 16K / 64K context per KV type (KV_CTX, KV_TYPES).
if want kv_quality; then
  # Issue 30: each KV cache type's quality on the trained small model, CPU and CUDA, against the CPU
  # f32 base (deltaserve-perplexity over the six held-out files; KV_HELDOUT: their ids, carried).
  echo "==== KV cache types: KL / top-1 / delta ppl on small-qwen35"
  P="$B/bin/deltaserve-perplexity" SQ="$DATA/small-qwen35-q8_0.gguf" RUNS="$O/kv_quality_runs.txt"
  : > "$RUNS"
  for f in ${KV_HELDOUT:-build/heldout}/heldout_*.json; do
    n=$(basename "$f" .json)
    timeout 120 "$P" --model "$SQ" --ids "$f" --backend cpu --save-base "/tmp/base_$n.bin" > /dev/null 2>&1 ||
      note "kv_quality: base of $n failed"
    for t in ${KV_TYPES:-f32 bf16 f16 q8_0 fp8 q4r}; do
      for be in cpu cuda; do
        echo "$n $be $t $(timeout 120 "$P" --model "$SQ" --ids "$f" --backend $be --kv-cache-type $t \
          --kl-base "/tmp/base_$n.bin" 2>&1 | tail -1)" >> "$RUNS"
      done
    done
  done
  python3 tools/kv_quality_table.py "$RUNS" | tee -a "$SUMMARY"
fi

if want kv_decode; then
  # Issue 30 on the H200: 9B decode at 512 / 16K / 64K context per KV type (tg64 after the prompt;
  # KV_CTX, KV_TYPES), and whether one 27B sequence of 262,144 tokens fits per type (27B_KV_TYPES).
  echo "==== KV cache types: 9B decode by context, 27B capacity"
  [ -f $M9 ] || timeout 60 "$B/bin/deltaserve-synth" --shape 9b --out $M9 > "$O/synth9.log" 2>&1
  for t in ${KV_TYPES:-f32 bf16 q8_0 fp8 q4r}; do
    bench 400 -m $M9 --backend cuda -p ${KV_CTX:-512,16384,65536} -n 64 -r 1 --kv-cache-type $t > "$O/kv_decode_$t.log" 2>&1
    note "9B kv $t rc=$?: $(grep -E '^\| .*tg' "$O/kv_decode_$t.log" | tr -s ' ' | tr '\n' ' ')"
  done
fi
