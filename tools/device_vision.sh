# SECTIONS=vision of tools/device_check.sh (sourced from it: uses its B, DATA, O, M9, note and bench).
# Vision input (issue 31) on the H200:
# - the CUDA vision tests when bundled (test_qwen35_vision_cuda, test_qwen35_vl_cuda);
# - deltaserve-logits --backend cuda --image on the tiny VL fixture against the HF reference's
#   last-row logits (the reference prompts with one pad per image; bf16 prefill: within 0.1, as
#   test_qwen35_vl_cuda holds it);
# - the synthetic 9B with the real-shape Qwen3.5 tower (deltaserve-synth --shape mmproj-9b: depth 27,
#   hidden 1152, F16, projecting to 4096): deltaserve-bench --mmproj at VISION_SIZES (default
#   448,1024,2048: 196 / 1024 / 4096 image tokens), the tower alone (ms, TFLOP/s) and a one-image
#   prompt's time to first token vs as many text tokens, in one prefill step and in serve's 2048-token
#   steps (-b 2048), best of VISION_REPEAT (3); the same rows as JSON in vision9.json.
# The two tables print last (device_check.sh's summary).
echo "==== vision: CUDA tests, logits with images vs the reference, 9B + Qwen3.5 tower bench"
for t in test_qwen35_vision_cuda test_qwen35_vl_cuda; do
  [ -x "$B/bin/$t" ] || continue
  timeout 150 "$B/bin/$t" > "$O/$t.log" 2>&1
  note "$t rc=$? $(grep -E '^\[  (PASSED|FAILED)  \]' "$O/$t.log" | tr '\n' ' ')"
done

VL=$O/vl_logits
mkdir -p "$VL"
r=$(timeout 120 python3 - "$B/bin/deltaserve-logits" "$DATA" "$VL" <<'PY'
import base64, json, struct, subprocess, sys
tool, data, out = sys.argv[1:4]
m = json.load(open(data + "/reference/qwen35_vl.json"))
pad, res = m["image_token_id"], []
for name in ("one_image", "two_images", "resized_image"):
    p = m["prompts"][name]
    ids = [t for i, t in enumerate(p["ids"]) if not (t == pad and i > 0 and p["ids"][i - 1] == pad)]
    cmd = [tool, "--backend", "cuda", "--model", data + "/tiny-qwen35-vl-q8_0.gguf",
           "--mmproj", data + "/tiny-qwen35-vl-mmproj-f16.gguf", "--ids", ",".join(map(str, ids)),
           "--out", "%s/%s.f32" % (out, name)]
    for k in p["images"]:
        im = m["images"][k]
        path = "%s/img%d.%s" % (out, k, im["format"])
        open(path, "wb").write(base64.b64decode(im["data_url"].split(",", 1)[1]))
        cmd += ["--image", path]
    if subprocess.run(cmd, capture_output=True).returncode != 0:
        res.append("%s ERROR" % name)
        continue
    got = open("%s/%s.f32" % (out, name), "rb").read()
    ref = open(data + "/reference/" + p["last_logits"]["file"], "rb").read()
    a, b = struct.unpack("%df" % (len(got) // 4), got), struct.unpack("%df" % (len(ref) // 4), ref)
    d = max(abs(x - y) for x, y in zip(a, b)) if len(a) == len(b) else float("inf")
    res.append("%s %s (max |cuda - ref| %.2g)" % (name, "MATCH" if d < 0.1 else "DIFFER", d))
print(", ".join(res))
PY
)
note "vision logits --image on cuda vs HF: ${r:-ERROR}"

MM9=/tmp/mmproj-9b.gguf
[ -f $M9 ] || timeout 60 "$B/bin/deltaserve-synth" --shape 9b --out $M9 > "$O/synth9.log" 2>&1 || tail -3 "$O/synth9.log"
timeout 60 "$B/bin/deltaserve-synth" --shape mmproj-9b --out $MM9 > "$O/synth_mmproj9.log" 2>&1 || tail -3 "$O/synth_mmproj9.log"
VS=${VISION_SIZES:-448,1024,2048} VR=${VISION_REPEAT:-3}
bench 300 -m $M9 --mmproj $MM9 --backend cuda --image-size "$VS" -r "$VR" > "$O/vision9.log" 2>&1
note "vision9 one prefill step rc=$?"
bench 300 -m $M9 --mmproj $MM9 --backend cuda --image-size "$VS" -r "$VR" -b 2048 > "$O/vision9_2048.log" 2>&1
note "vision9 2048-token steps rc=$?"
bench 300 -m $M9 --mmproj $MM9 --backend cuda --image-size "$VS" -r "$VR" -o json > "$O/vision9.json" 2> "$O/vision9_json.err"
note "vision9 json rc=$?"
