# SECTIONS=moe of tools/device_check.sh (sourced from it: uses its B, O, M9, SUMMARY, want, note and bench).
# Qwen3.5 MoE (issue 32) on the H200; the steps of MOE_STEPS (default "ops sanitizer model timing bench"),
# always in this order:
# - ops: test_backend_ops --gtest_filter='*moe_*:*Moe*' (moe_route / moe_experts: CPU vs float64, CUDA vs CPU);
# - sanitizer: compute-sanitizer --tool memcheck, then racecheck, over
#   Table/BackendOpsCuda.MatchesCpuF32/moe_* (when /usr/local/cuda/bin/compute-sanitizer exists and a GPU
#   is visible; --error-exitcode 1, so a reported error is rc=1);
# - model: test_qwen35moe_cuda (the tiny qwen35moe fixture on CUDA vs the reference and the CPU);
# - timing: test_backend_ops --gtest_also_run_disabled_tests --gtest_filter='*Timing35b*' (us per moe_experts
#   call at the 35B-A3B expert shape, T = 1..2048; its "[ timing ]" lines go into the summary);
# - bench: deltaserve-synth --shape MOE_SHAPE (default 35b-a3b: 37.8 GB = 35.2 GiB of Q8_0; tiny-moe for a
#   smoke run) into the first of MOE_DIR, /tmp, /var/tmp, the repo root and /dev/shm with MOE_NEED_GIB free
#   (df; none: a note and no bench; a file a warm machine kept from an earlier call is reused), then
#   deltaserve-bench --backend MOE_BACKEND (cuda) -p MOE_PROMPTS (2048,8192,16384; tiny-moe: 512,2048)
#   -n 128 -r 2, and -p 128 -n 128 -r 2 --parallel MOE_PARALLEL (1,8,32,64: batch-1 decode at a short
#   context, 8 / 32 / 64 streams); llama.cpp's llama-bench (prefill; tg128 at the same depths) and
#   llama-batched-bench on the same GGUF when on the PATH or in the bundle's bin/ (LLAMA_FLAGS, default
#   "-ngl 99 -fa 1"). Bundle: test_backend_ops, test_qwen35moe_cuda, deltaserve-synth, deltaserve-bench,
#   deltaserve-gguf-info (the tensor list for the limits; without it only b1 gets issue 32's figure).
# The table (moe_table.txt, printed last by device_check.sh): tok/s per row and, for decode, the limit that
# the bytes a step must read allow at MOE_PEAK_GBPS (4280: issue 32's measured copy): limit_w counts weights
# only, as issue 32 does (k of E routed experts' rows, shared expert, router, attention / GDN, LM head, one
# embedding row, from deltaserve-gguf-info's tensor list; N streams read the experts uniform routing touches,
# E (1 - (1 - k/E)^N) per layer); limit_all adds each sequence's GDN state r/w and K/V at the run's mean
# context (deltaserve-bench's header); then llama.cpp's tok/s and the ratio to it.
# MOE_BUDGET (570 s after device_check.sh started) caps every step's timeout so one call ends inside the
# 600-s limit; a step left under 30 s is skipped with a note (run it in another call with MOE_STEPS).
echo "==== moe: MoE op and model tests, sanitizers, synthetic ${MOE_SHAPE:-35b-a3b} bench vs the active-bytes limit"
MS=${MOE_SHAPE:-35b-a3b} MBE=${MOE_BACKEND:-cuda} CS=/usr/local/cuda/bin/compute-sanitizer
moe_gpu=0
nvidia-smi -L 2> /dev/null | grep -q '^GPU ' && moe_gpu=1
[ $moe_gpu = 1 ] || note "moe: no GPU visible (nvidia-smi -L): the CUDA tests skip themselves, no sanitizer or cuda bench"
moe_step() { case " ${MOE_STEPS:-ops sanitizer model timing bench} " in *" $1 "*) return 0 ;; esac; return 1; }

# A step's timeout in MT: $1 seconds, or what MOE_BUDGET leaves less 10 s; a note and 1 under 30 s ($2 = step).
moe_t() {
  local left=$((${MOE_BUDGET:-570} - SECONDS - 10))
  if [ $left -lt 30 ]; then
    note "moe $2: skipped, ${left} s left of MOE_BUDGET (run it in another call: MOE_STEPS)"
    return 1
  fi
  MT=$(($1 < left ? $1 : left))
}

# $1 = tag, $2 = seconds, $3 = the bundle's gtest binary, then the command line: one summary line.
moe_gtest() {
  local tag=$1 secs=$2 bin=$3
  shift 3
  [ -x "$B/bin/$bin" ] || { note "moe $tag: $bin not in the bundle, skipped"; return 1; }
  moe_t "$secs" "$tag" || return 1
  timeout -k 10 "$MT" "$@" > "$O/moe_$tag.log" 2>&1
  note "moe $tag rc=$? $(grep -E '^\[  (PASSED|FAILED)  \] [0-9]|^\[  SKIPPED \] [0-9]' "$O/moe_$tag.log" | sed 's/, listed below://' | tr '\n' ' ')"
  grep -E '^\[  FAILED  \] [A-Za-z]' "$O/moe_$tag.log" | head -10
  return 0
}

if moe_step ops; then
  moe_gtest ops 150 test_backend_ops "$B/bin/test_backend_ops" --gtest_filter='*moe_*:*Moe*'
fi
if moe_step sanitizer; then
  if [ ! -x $CS ]; then
    note "moe sanitizer: no $CS on this machine, skipped"
  elif [ $moe_gpu = 0 ]; then
    note "moe sanitizer: no GPU visible, skipped"
  else
    for tool in memcheck racecheck; do
      moe_gtest $tool 150 test_backend_ops $CS --tool $tool --error-exitcode 1 "$B/bin/test_backend_ops" \
        --gtest_filter='Table/BackendOpsCuda.MatchesCpuF32/moe_*' &&
        note "  $tool says: $(grep -E '(ERROR|RACECHECK) SUMMARY' "$O/moe_$tool.log" | tail -1 | sed -E 's/^=+ *//; s/ERROR SUMMARY/summary/')"
    done
  fi
fi
if moe_step model; then
  moe_gtest model 150 test_qwen35moe_cuda "$B/bin/test_qwen35moe_cuda"
fi
if moe_step timing; then
  moe_gtest timing 120 test_backend_ops "$B/bin/test_backend_ops" --gtest_also_run_disabled_tests \
    --gtest_filter='*Timing35b*' && grep '^\[ timing \]' "$O/moe_timing.log" | sed 's/^/  /' | tee -a "$SUMMARY"
fi

# The synthetic GGUF: sets MM (empty when skipped). A finished one (MM.ok) of an earlier call is reused;
# else the first of MOE_DIRS (disks first, /dev/shm last: RAM) with MOE_NEED_GIB free.
MOE_DIRS=$(echo ${MOE_DIR:-} /tmp /var/tmp "$PWD" /dev/shm)
moe_synth() {
  local d free best="" bestfree=-1 need
  MM=""
  for d in $MOE_DIRS; do [ -f "$d/moe-$MS.gguf.ok" ] && { MM=$d/moe-$MS.gguf; note "moe synth: reusing $MM"; return 0; }; done
  case $MS in 35b-a3b) need=38 ;; 122b-a10b) need=125 ;; *) need=2 ;; esac
  need=${MOE_NEED_GIB:-$need}
  for pass in 1 2; do
    best="" bestfree=-1
    for d in $MOE_DIRS; do
      [ -d "$d" ] && [ -w "$d" ] || continue
      free=$(df -P -BG "$d" 2> /dev/null | awk 'NR == 2 { sub("G", "", $4); print $4 }')
      [ -n "$free" ] || continue
      [ "$free" -ge "$need" ] && { best=$d bestfree=$free; break; }
      [ "$free" -gt "$bestfree" ] && bestfree=$free
    done
    [ -n "$best" ] && break
    # The 9B sections all ran before this one (27b removes it too): its files make room.
    [ $pass = 1 ] && [ -f "$M9" ] && { rm -f "$M9" /tmp/mmproj-9b.gguf; note "moe synth: removed $M9 for room"; }
  done
  df -h $MOE_DIRS > "$O/moe_df.txt" 2>&1
  if [ -z "$best" ]; then
    note "moe synth: skipped: $MS needs ~$need GiB, none of $MOE_DIRS has it (at most $bestfree GiB: moe_df.txt)"
    return 1
  fi
  moe_t 420 synth || return 1
  timeout -k 10 "$MT" "$B/bin/deltaserve-synth" --shape "$MS" --out "$best/moe-$MS.gguf" > "$O/moe_synth.log" 2>&1
  local rc=$?
  note "moe synth rc=$rc into $best ($bestfree GiB free): $(tail -1 "$O/moe_synth.log")"
  [ $rc = 0 ] || { rm -f "$best/moe-$MS.gguf"; return 1; }
  MM=$best/moe-$MS.gguf
  touch "$MM.ok"
}

# llama.cpp's binaries on the PATH or in the bundle; "" when neither has it.
moe_find() { command -v "$1" 2> /dev/null || { [ -x "$B/bin/$1" ] && echo "$B/bin/$1"; } || true; }

moe_bench() {
  if [ "$MBE" = cuda ] && [ $moe_gpu = 0 ]; then
    note "moe bench: no GPU visible, skipped (MOE_BACKEND=cpu MOE_SHAPE=tiny-moe runs it on the CPU)"
    return
  fi
  local t
  for t in deltaserve-synth deltaserve-bench; do
    [ -x "$B/bin/$t" ] || { note "moe bench: $t not in the bundle, skipped"; return; }
  done
  rm -f "$O"/moe_llama_* "$O/moe_table.txt" "$O/moe_gguf_info.txt"
  moe_synth || return
  [ -x "$B/bin/deltaserve-gguf-info" ] && timeout 60 "$B/bin/deltaserve-gguf-info" "$MM" > "$O/moe_gguf_info.txt" 2>&1
  local P=2048,8192,16384 LF=${LLAMA_FLAGS:--ngl 99 -fa 1} lb lbb
  [ "$MS" = tiny-moe ] && P=512,2048  # its context is 8192
  P=${MOE_PROMPTS:-$P}
  if moe_t 300 bench; then
    bench "$MT" -m "$MM" --backend "$MBE" -p "$P" -n 128 -r 2 > "$O/moe_bench.log" 2>&1
    note "moe bench $MS -p $P -n 128 rc=$?"
  fi
  if moe_t 240 batched; then
    bench "$MT" -m "$MM" --backend "$MBE" -p 128 -n 128 -r 2 --parallel "${MOE_PARALLEL:-1,8,32,64}" > "$O/moe_batched.log" 2>&1
    note "moe bench $MS --parallel ${MOE_PARALLEL:-1,8,32,64} rc=$?"
  fi
  lb=$(moe_find llama-bench) lbb=$(moe_find llama-batched-bench)
  if [ -n "$lb" ]; then
    # shellcheck disable=SC2086
    if moe_t 300 llama_pp; then
      timeout -k 10 "$MT" "$lb" -m "$MM" $LF -r 2 -p "$P" -n 0 -o csv > "$O/moe_llama_pp.csv" 2> "$O/moe_llama_pp.err"
      note "moe llama-bench prefill exit $?"
    fi
    if moe_t 240 llama_tg; then  # tg128 at depth 0 and the prompts' lengths (-d: llama.cpp since 2025-04)
      timeout -k 10 "$MT" "$lb" -m "$MM" $LF -r 2 -p 0 -n 128 -d "0,$P" -o csv > "$O/moe_llama_tg.csv" 2> "$O/moe_llama_tg.err" ||
        { moe_t 120 llama_tg && timeout -k 10 "$MT" "$lb" -m "$MM" $LF -r 2 -p 0 -n 128 -o csv > "$O/moe_llama_tg.csv" 2>> "$O/moe_llama_tg.err"; }
      note "moe llama-bench tg128 exit $?"
    fi
  fi
  if [ -n "$lbb" ] && moe_t 240 llama_batched; then
    # shellcheck disable=SC2086
    timeout -k 10 "$MT" "$lbb" -m "$MM" -ngl 99 -c 20480 -b 2048 -ub 512 -npp 128 -ntg 128 \
      -npl "${MOE_PARALLEL:-1,8,32,64}" > "$O/moe_llama_batched.log" 2>&1
    note "moe llama-batched-bench exit $?"
  fi
  [ -n "$lb$lbb" ] || note "moe llama.cpp: not available (no llama-bench / llama-batched-bench on the PATH or in the bundle)"
  python3 - "$MS" "$MBE" "${MOE_PEAK_GBPS:-4280}" "$O" "$(du -b "$MM" | cut -f1)" > "$O/moe_table.txt" 2>&1 <<'PY'
import csv, re, sys
shape, backend, peak, o, size = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4], int(sys.argv[5])
def read(name):
    try:
        return open("%s/%s" % (o, name), errors="replace").read()
    except OSError:
        return ""
# Weight bytes by kind from deltaserve-gguf-info (the MTP block does not run in plain decode).
meta, tensors = {}, []
for line in read("moe_gguf_info.txt").splitlines():
    m = re.match(r"^\d+\s+(\S+)\s+\S+\s+\[([^\]]*)\]\s+(\d+)\s*$", line)
    if m:
        tensors.append((m.group(1), [int(x) for x in m.group(2).split(",")], int(m.group(3))))
        continue
    m = re.match(r"^\S+\.(block_count|nextn_predict_layers|expert_count|expert_used_count)\s+\S+\s+(\d+)", line)
    if m:
        meta[m.group(1)] = int(m.group(2))
E, k = meta.get("expert_count", 0), meta.get("expert_used_count", 0)
main = meta.get("block_count", 0) - meta.get("nextn_predict_layers", 0)
names = {t[0] for t in tensors}
w = dict(routed=0, shared=0, router=0, head=0, rest=0)
for name, ne, nb in tensors:
    m = re.match(r"blk\.(\d+)\.", name)
    if m and int(m.group(1)) >= main:
        continue
    if name.endswith("_exps.weight"):
        w["routed"] += nb
    elif "shexp" in name:
        w["shared"] += nb
    elif name.endswith("ffn_gate_inp.weight"):
        w["router"] += nb
    elif name == "token_embd.weight":  # one row; the whole table too when it is the (tied) LM head
        w["head"] += nb // ne[-1] + (0 if "output.weight" in names else nb)
    elif name in ("output.weight", "output_norm.weight"):
        w["head"] += nb
    else:
        w["rest"] += nb
have = E > 0 and k > 0 and main > 0
fixed = (w["shared"] + w["router"] + w["head"] + w["rest"]) * 1e-9
def weights_gb(n):  # weight GB a step of n tokens of n sequences reads under uniform routing
    return fixed + w["routed"] * 1e-9 * (1 - (1 - k / E) ** n)
m = re.search(r"per decode token: [\d.]+ GB weights \+ ([\d.]+) GB GDN state r/w \+ ([\d.]+) KB KV",
              read("moe_bench.log") + read("moe_batched.log"))
state_gb, kv_gb = (float(m.group(1)), float(m.group(2)) * 1e-6) if m else (None, None)
def rows(text):
    single, batched, mode = [], [], 0
    for line in text.splitlines():
        if line.startswith("batched decode:"):
            mode = 1
        f = line.split()
        if not f or not f[0].isdigit():
            continue
        try:
            if mode == 0 and len(f) >= 8:
                single.append((int(f[0]), float(f[2]), float(f[4])))
            elif mode == 1 and len(f) >= 4:
                batched.append((int(f[0]), int(f[1]), float(f[3])))
        except ValueError:
            pass
    return single, batched
s1, _ = rows(read("moe_bench.log"))
s2, b2 = rows(read("moe_batched.log"))
llama = {}
for name in ("moe_llama_pp.csv", "moe_llama_tg.csv"):
    try:
        for r in csv.DictReader(read(name).splitlines()):
            llama[(int(r.get("n_prompt") or 0), int(r.get("n_gen") or 0), int(r.get("n_depth") or 0))] = float(r["avg_ts"])
    except (KeyError, ValueError, TypeError):
        pass
llb, head = {}, None
for line in read("moe_llama_batched.log").splitlines():
    cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.startswith("|") else []
    if "S_TG t/s" in cells:
        head = cells
    elif head and len(cells) == len(head):
        try:
            llb[int(cells[head.index("B")])] = float(cells[head.index("S_TG t/s")])
        except ValueError:
            pass
out = []
def row(test, ts, n=0, ctx=0, ll=None):
    lw = la = None
    if n and have:
        lw = n * peak / weights_gb(n)
        if state_gb is not None:
            la = n * peak / (weights_gb(n) + n * (state_gb + kv_gb * ctx))
    elif n == 1 and shape == "35b-a3b":
        lw = 1350 * peak / 4280  # issue 32's figure (no tensor list to count from)
    f = lambda v, p="%.1f": p % v if v else "-"
    out.append("%-15s %-10s %-9s %-7s %-10s %-7s %-10s %-7s" % (
        test, f(ts), f(lw, "%.0f"), f(lw and 100 * ts / lw, "%.1f%%"), f(la, "%.0f"), f(la and 100 * ts / la, "%.1f%%"),
        f(ll), f(ll and ts / ll, "%.2fx")))
for p, pp, tg in s1:
    row("pp%d" % p, pp, ll=llama.get((p, 0, 0)))
for p, pp, tg in s2:
    row("pp%d" % p, pp)
for p, pp, tg in s2 + s1:
    row("b1 tg128 @%d" % p, tg, 1, p + 64, llama.get((0, 128, p), llama.get((0, 128, 0)) if p <= 128 else None))
for p, n, agg in b2:
    row("b%d tg128 @%d" % (n, p), agg, n, p + 64, llb.get(n))
print("moe %s on %s: %.2f GB file; limits at %.0f GB/s (deltaserve-bench's GB/tok and limit columns count every"
      " expert: ignore them here)" % (shape, backend, size * 1e-9, peak))
if have:
    print("active weights per decode token: %.3f GB = routed %d/%d %.3f + shared %.3f + router %.3f + attention/GDN/norms"
          " %.3f + LM head and embedding row %.3f (all experts: %.3f GB)" % (weights_gb(1), k, E, w["routed"] * k / E * 1e-9,
          w["shared"] * 1e-9, w["router"] * 1e-9, w["rest"] * 1e-9, w["head"] * 1e-9, fixed + w["routed"] * 1e-9))
else:
    print("no deltaserve-gguf-info tensor list: %s" % ("b1 limit_w is issue 32's ~1,350 tok/s at 4.28 TB/s"
          if shape == "35b-a3b" else "no limits"))
if state_gb is not None:
    print("per sequence: %.3f GB GDN state r/w + %.1f KB K/V per position (limit_all)" % (state_gb, kv_gb * 1e6))
if not llama and not llb:
    print("llama.cpp: not available")
print("targets (issue 32): b1 decode >= 60% of limit_w and >= 2x llama.cpp; prefill >= 2.5x llama.cpp; b64 >= 2x llama.cpp")
print("%-15s %-10s %-9s %-7s %-10s %-7s %-10s %-7s" % ("test", "tok/s", "limit_w", "of_w", "limit_all", "of_all",
                                                      "llama.cpp", "x_llama"))
print("\n".join(out))
PY
  note "moe table rc=$? (moe_table.txt, printed last)"
  if want 27b || want 27b_spec; then rm -f "$MM" "$MM.ok"; note "moe: removed $MM (room for the 27B)"; fi
}
if moe_step bench; then moe_bench; fi
