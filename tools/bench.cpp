// deltaserve-bench: prefill and decode speed of one in-process stage holding the whole model,
// or of N worker processes over the real pipeline (--workers N; ZeroMQ, no HTTP).
//
//   deltaserve-bench -m|--model F.gguf [--backend cpu|cuda] [--device N] [-p|--prompt 512,2048,8192]
//                    [-n|--gen 128] [-b|--batch N] [-r|--repeat 3] [-t|--threads T] [--workers N]
//                    [--devices a,b,...] [--prefill-precision bf16|f32] [-o|--output table|json]
//                    [--no-warmup] [--spec-k K] [--parallel 1,8,32,64] [--peak-gbps G]
//                    [--bf16-weights] [--decode-gemv auto|dp4a|mma] [--ablate NAME,...]
//                    [--kv-cache-type T] [--kv-cache-type-k T] [--kv-cache-type-v T]
//   deltaserve-bench --http URL [deltaserve-bench-http flags]   (a running server; see bench_http.h)
//   deltaserve-bench -m F.gguf --mmproj M.gguf --image-size 448,1024,2048|WxH,... [--backend cuda] [-b N] [-r 3]
//                    [-o json]   (the vision rows instead of the text ones: tools/bench_vision.h)
//
// Prompts are random token ids (fixed seed). Prefill: the prompt in one step (or -b N tokens
// per step, llama-bench's ubatch), timed from submission to logits on
// the host; decode: --gen greedy steps of one token right after the prompt (so "tg128 at
// context n"; --gen 0 skips it). Every forward ends by downloading logits (on cuda, decode steps
// download a greedy digest computed on the device instead; --ablate device-digest: the full logits), which waits for
// the device stream, so host wall time is device time plus the host's share. A short warm-up run goes first (module
// load, first allocations).
// --ablate NAME,... (cuda, in-process): switch production choices of the backend off, one name
// each (kAblations below; an unknown name is an error listing the valid ones).
// Each table figure is the best of --repeat runs (METHOD.md: report best-of with the spread);
// -o json prints llama-bench-style rows instead, with mean and stddev (tools/bench_report.h).
// --spec-k K (in-process only): after each prompt, one line with the cost of MTP speculation's
// pieces at that context relative to a decode step (verify 1+K, MTP rows; tools/bench_spec.h);
// --draft-vocab N times the drafts that pick among the first N ids.
// With --workers the workers get --threads and --prefill-precision each and, on cuda, rank r
// uses GPU r, or the r-th entry of --devices (0,0: two worker processes sharing GPU 0, as with
// `deltaserve serve --devices`); --device applies to the in-process stage only. CPU workers
// ignore --devices (it is still checked: one entry per worker) and always compute in f32.
// --parallel N,... (issue 14): for N = 1 the rows above; for each N > 1 and prompt length P,
// batched decode: N sequences prefilled one after another with the same prompt (not timed),
// then --gen steps in which all N advance one token in ONE forward step (in-process: one
// StepInput of N SeqSteps with a digest row each, like the server's batched step; --workers:
// one engine.step() with N SeqRequests; with --decode-groups G the N sequences form G groups,
// each its own step, all in flight at once, a group's next step sent as its result comes back,
// like `serve --decode-groups`). Reported per (P, N): mean step time, aggregate tok/s,
// the bytes a step must move (weights once + N x (GDN state r/w + KV of the context)) and, with
// the device's bandwidth (--peak-gbps; cuda default: the H200's measured copy, docs/PERFORMANCE.md), the
// aggregate tok/s that byte count allows and the fraction reached. Each --repeat run prefills
// its N sequences afresh and drops them afterwards.
//
// --kv-cache-type[-k|-v] T: the KV cache's element types (common/kv_options.h; default fp8, as serve), for
// the in-process stage and the workers alike (sent in Assign, as serve does).
//
// Roofline context: weight bytes streamed per decode token (every main-stack weight, the LM
// head, one embedding row) plus f32 GDN state read+write and the KV read at that context (as its
// types store it), and FLOPs per prefill token (2 per matrix weight plus causal attention), each
// with the rate the measured time implies. Compare with the device's measured ceilings (copy
// bandwidth, bf16 dense throughput: docs/PERFORMANCE.md).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/gguf.h"
#include "common/kv_options.h"
#include "common/model_config.h"
#include "common/stage_footprint.h"
#include "coordinator/engine/engine.h"
#include "tools/bench_cost.h"
#include "tools/bench_http.h"
#include "tools/bench_report.h"
#include "tools/bench_runner.h"
#include "tools/bench_spec.h"
#include "tools/bench_vision.h"
#include "tools/cli_args.h"
#include "worker/decode_gemv.h"
#include "worker/stage_model.h"
#ifdef DELTASERVE_HAVE_CUDA
#include <cuda_profiler_api.h>
#include <cuda_runtime_api.h>

#include "worker/cuda_backend.h"
#endif

namespace {

struct Options {
  std::string model;
  std::vector<size_t> prompts{512};
  size_t gen = 64;
  size_t chunk = 0;
  int repeat = 3;
  int threads = 2;
  std::string backend = "cpu";
  bool bf16_prefill = true;   // --prefill-precision f32: cuda prefill products on f32 SIMT (not bf16 tensor cores)
  bool bf16_weights = false;  // --bf16-weights: persistent bf16 weight copies (no per-call dequant)
  // --decode-gemv: 1..4-token GEMVs on int8 tensor cores ("mma"), the dp4a GEMV ("dp4a"), or as a
  // worker picks it ("auto": mma with --spec-k or for models wider than 4096, else dp4a)
  std::string decode_gemv = "auto";
  std::vector<std::string>
      ablate;  // --ablate a,b,...: production choices of the CUDA backend switched off (kAblations)
  int device = 0;
  std::vector<int> devices;  // --workers on cuda: GPU of each worker; empty = worker r on GPU r
  bool warmup = true;
  bool profile_decode = false;     // --profile-decode: cudaProfilerStart/Stop around each decode run (and each greedy
                                   // verify step of --spec-k)
  bool profile_prefill = false;    // --profile-prefill: the same around each prefill run
  uint32_t workers = 0;            // 0: in-process; N: N deltaserve-worker processes (pipeline)
  uint32_t pipeline_depth = 0;     // --pipeline-depth: prefill chunks in flight (0 = min(workers + 1, 4), 1 = off)
  uint32_t decode_groups = 1;      // --decode-groups: batched decode rows split into groups in flight over the workers
  std::string busy_poll = "auto";  // --busy-poll auto|on|off: the engine and its workers (EngineOptions::busy_poll)
  std::string early_handoff = "on";  // --early-handoff on|host|off (EngineOptions::early_handoff)
  std::string mps = "auto";  // --mps off|auto|on: workers sharing a GPU under a private MPS daemon (EngineOptions::mps)
  bool json = false;         // -o json: one JSON object per result row instead of the table
  uint32_t spec_k = 0;       // > 0: also time MTP speculation's pieces per prompt (tools/bench_spec.h)
  uint32_t draft_vocab = 0;  // --draft-vocab: drafts among the first N ids (StageOptions::draft_vocab)
  std::vector<size_t> parallel{1};  // --parallel: sequences per decode step; 1 = the classic pp/tg rows
  double peak_gbps = 0;             // --peak-gbps: device bandwidth for the batched byte limit; 0 = unknown
  ds::KvTypeFlags kv_cache;         // --kv-cache-type[-k|-v]: the KV cache's element types
  std::string mmproj;               // --mmproj: the vision rows (with --image-size) instead of the text ones
  std::vector<ds::ImageSize> image_sizes;
};

// --ablate names: each switches one production choice of the in-process CUDA stage off
// (ds::CudaAblations, worker/cuda_backend.h, says what each choice is).
struct Ablation {
  const char* name;
  const char* effect;
};
constexpr Ablation kAblations[] = {
    {"cublaslt", "bf16 prefill products on our mma.sync GEMM instead of cuBLASLt"},
    {"device-digest", "decode downloads the full logits (no device digest)"},
    {"fused-decode-ops", "residual add + RMSNorm, conv + L2, batched GDN / attention as separate launches"},
    {"stacked-weights", "alpha/beta, qkv/gate, gate/up as separate matrices"},
    {"gdn-tensor-cores", "the chunked GDN prep + state pass in f32 also in bf16 prefill mode"},
    {"prefill-fusions", "SwiGLU + down projection, GDN head norms unfused"},
    {"split-small", "5..64-token split-rows products off the small-batch GEMM (GEMV / SIMT / prefill GEMM)"},
    {"q8-split", "Q8_0 weights on the device in GGUF order (no split rows)"},
    {"pdl", "decode kernels as ordinary launches (no programmatic dependent launches)"},
};

static_assert(sizeof(kAblations) / sizeof(kAblations[0]) == 9, "kUsage lists the --ablate names: keep it in step");

std::string ablation_names() {
  std::string names;
  for (const Ablation& a : kAblations) names += std::string(names.empty() ? "" : ", ") + a.name;
  return names;
}

[[maybe_unused]] bool ablated(const std::vector<std::string>& list, const char* name) {
  return std::find(list.begin(), list.end(), name) != list.end();
}

// Sane upper bound for --parallel (the server's batches are far smaller; a typo like 6400 should fail fast).
constexpr size_t kMaxParallel = 1024;
// The H200's measured copy bandwidth (docs/PERFORMANCE.md), the cuda default for --peak-gbps.
constexpr double kH200CopyGbps = 4300;

using ds::bench::batch_decode_bytes;
using ds::bench::decode_bytes;
using ds::bench::model_cost;
using ds::bench::ModelCost;
using ds::bench::prefill_flops;
using ds::cli::parse_number;

const ds::cli::Usage kUsage{
    "deltaserve-bench",
    "--model F.gguf [--backend cpu|cuda] [--device N] [--prefill-precision bf16|f32] "
    "[--bf16-weights] [--decode-gemv auto|dp4a|mma] [--ablate NAME,...] [--prompt 512,2048] [--gen 128] [-b|--batch N] "
    "[--repeat 3] [--threads T] "
    "[--workers N] [--devices a,b,...] [--pipeline-depth N] [--decode-groups G] [--busy-poll auto|on|off] [--mps "
    "auto|on|off] [--early-handoff on|host|off] [-o table|json] [--no-warmup] [--profile-decode] [--profile-prefill] "
    "[--spec-k K] [--draft-vocab N] [--kv-cache-type T] [--kv-cache-type-k T] [--kv-cache-type-v T] "
    "[--parallel 1,8,32,64] [--peak-gbps G] [--mmproj M.gguf --image-size 448,1024x768,...] "
    "(short: -m -p -n -b -r -t -o; or --http URL [deltaserve-bench-http flags]; --ablate names: "
    "cublaslt, device-digest, fused-decode-ops, stacked-weights, gdn-tensor-cores, "
    "prefill-fusions, split-small, q8-split, pdl)"};

// -o table | json; anything else is a usage error.
bool parse_output_format(const std::string& v) {
  if (v != "table" && v != "json") kUsage.fail("--output must be table or json, got '" + v + "'");
  return v == "json";
}

// --prefill-precision bf16 | f32: true for bf16 (tensor cores).
bool parse_prefill_precision(const std::string& v) {
  if (v != "bf16" && v != "f32") kUsage.fail("--prefill-precision must be bf16 or f32, got '" + v + "'");
  return v == "bf16";
}

// --ablate a,b,...: every name must be one of kAblations.
std::vector<std::string> parse_ablations(const std::string& v) {
  std::vector<std::string> names;
  size_t start = 0;
  while (start <= v.size()) {
    const size_t end = std::min(v.find(',', start), v.size());
    const std::string name = v.substr(start, end - start);
    const bool known =
        std::any_of(std::begin(kAblations), std::end(kAblations), [&](const Ablation& a) { return name == a.name; });
    if (!known) kUsage.fail("--ablate: unknown name '" + name + "' (valid: " + ablation_names() + ")");
    names.push_back(name);
    start = end + 1;
  }
  return names;
}

bool wants_single(const Options& o) {
  return std::find(o.parallel.begin(), o.parallel.end(), size_t{1}) != o.parallel.end();
}

bool wants_batched(const Options& o) {
  return std::any_of(o.parallel.begin(), o.parallel.end(), [](size_t n) { return n > 1; });
}

// --parallel N > 1 times decode steps only, and --spec-k belongs to the N = 1 rows.
void check_parallel(Options& o) {
  if (wants_batched(o) && o.gen == 0) kUsage.fail("--parallel N > 1 times batched decode steps: --gen must be >= 1");
  if (o.spec_k > 0 && !wants_single(o))
    kUsage.fail("--spec-k runs with the single-sequence rows: include 1 in --parallel");
  if (o.peak_gbps == 0 && o.backend == "cuda") o.peak_gbps = kH200CopyGbps;
}

// --devices only places worker processes, one entry each (the in-process stage takes --device).
void check_devices(const Options& o) {
  if (o.devices.empty()) return;
  if (o.workers == 0) kUsage.fail("--devices places worker processes: give --workers N (in-process: --device N)");
  if (o.devices.size() != o.workers) {
    kUsage.fail("--devices must name one GPU per worker: " + std::to_string(o.devices.size()) + " for --workers " +
                std::to_string(o.workers));
  }
}

Options parse(int argc, char** argv) {
  Options o;
  ds::cli::ArgReader args(kUsage, argc, argv);
  for (std::string a; args.next(a);) {
    if (a == "--model" || a == "-m") {
      o.model = args.value();
    } else if (a == "--prompt" || a == "-p") {
      o.prompts = ds::cli::parse_list<size_t>(kUsage, a, args.value(), 1);
    } else if (a == "--gen" || a == "-n") {
      o.gen = parse_number<size_t>(kUsage, a, args.value(), 0);
    } else if (a == "--batch" || a == "-b") {
      o.chunk = parse_number<size_t>(kUsage, a, args.value(), 1);
    } else if (a == "--repeat" || a == "-r") {
      o.repeat = parse_number<int>(kUsage, a, args.value(), 1);
    } else if (a == "--threads" || a == "-t") {
      o.threads = parse_number<int>(kUsage, a, args.value(), 1);
    } else if (a == "--backend") {
      o.backend = args.value();
    } else if (a == "--device") {
      o.device = parse_number<int>(kUsage, a, args.value(), 0);
    } else if (a == "--workers") {
      o.workers = parse_number<uint32_t>(kUsage, a, args.value(), 1, 64);
    } else if (a == "--mps") {
      o.mps = args.value();
      if (o.mps != "auto" && o.mps != "on" && o.mps != "off")
        kUsage.fail("--mps must be auto, on or off, got '" + o.mps + "'");
    } else if (a == "--early-handoff") {
      o.early_handoff = args.value();
      if (o.early_handoff != "on" && o.early_handoff != "host" && o.early_handoff != "off") {
        kUsage.fail("--early-handoff must be on, host or off, got '" + o.early_handoff + "'");
      }
    } else if (a == "--busy-poll") {
      o.busy_poll = args.value();
      if (o.busy_poll != "auto" && o.busy_poll != "on" && o.busy_poll != "off") {
        kUsage.fail("--busy-poll must be auto, on or off, got '" + o.busy_poll + "'");
      }
    } else if (a == "--pipeline-depth") {
      o.pipeline_depth = parse_number<uint32_t>(kUsage, a, args.value(), 0, 64);
    } else if (a == "--decode-groups") {
      o.decode_groups = parse_number<uint32_t>(kUsage, a, args.value(), 1, 8);
    } else if (a == "--devices") {
      o.devices = ds::cli::parse_list<int>(kUsage, a, args.value(), 0, 255);  // GPU indexes, 0,0 = shared
    } else if (a == "--prefill-precision") {
      o.bf16_prefill = parse_prefill_precision(args.value());
    } else if (a == "--output" || a == "-o") {
      o.json = parse_output_format(args.value());
    } else if (a == "--draft-vocab") {
      o.draft_vocab = parse_number<uint32_t>(kUsage, a, args.value(), 0, UINT32_MAX);
    } else if (a == "--spec-k") {
      o.spec_k = parse_number<uint32_t>(kUsage, a, args.value(), 1, 4);
    } else if (a == "--parallel") {
      o.parallel = ds::cli::parse_list<size_t>(kUsage, a, args.value(), 1, kMaxParallel);
    } else if (a == "--peak-gbps") {
      o.peak_gbps = parse_number<uint32_t>(kUsage, a, args.value(), 1, 1000000);
    } else if (a == "--no-warmup") {
      o.warmup = false;
    } else if (a == "--profile-decode") {
      o.profile_decode = true;
    } else if (a == "--profile-prefill") {
      o.profile_prefill = true;
    } else if (a == "--bf16-weights") {
      o.bf16_weights = true;
    } else if (a == "--decode-gemv") {
      const std::string v = args.value();
      if (v != "auto" && v != "dp4a" && v != "mma") {
        kUsage.fail("--decode-gemv must be auto, dp4a or mma, got '" + v + "'");
      }
      o.decode_gemv = v;
    } else if (a == "--ablate") {
      o.ablate = parse_ablations(args.value());
    } else if (a == "--mmproj") {
      o.mmproj = args.value();
    } else if (a == "--image-size") {
      o.image_sizes = ds::bench::parse_image_sizes(kUsage, a, args.value());
    } else if (!ds::cli::kv_cache_flag(kUsage, a, args, &o.kv_cache)) {
      args.unknown();
    }
  }
  if (o.model.empty()) kUsage.fail("--model is required");
  if (o.spec_k > 0 && o.workers > 0) kUsage.fail("--spec-k times the in-process stage; drop --workers");
  if (o.decode_groups > 1 && o.workers == 0)
    kUsage.fail("--decode-groups splits batched decode over worker processes: give --workers N");
  check_devices(o);
  if (o.backend != "cpu" && o.backend != "cuda") kUsage.fail("--backend must be cpu or cuda, got '" + o.backend + "'");
  if (!o.ablate.empty() && (o.backend != "cuda" || o.workers > 0)) {
    kUsage.fail("--ablate switches the in-process CUDA stage's kernels: give --backend cuda, without --workers");
  }
  check_parallel(o);
  if (o.mmproj.empty() != o.image_sizes.empty()) kUsage.fail("--mmproj and --image-size go together (vision rows)");
  if (!o.mmproj.empty() && (o.workers > 0 || o.spec_k > 0 || wants_batched(o)))
    kUsage.fail("--mmproj times the in-process stage: drop --workers, --spec-k and --parallel");
#ifndef DELTASERVE_HAVE_CUDA
  if (o.backend == "cuda")
    kUsage.fail("--backend cuda: this build has no CUDA support (configure with -DDELTASERVE_CUDA=ON)");
#endif
  return o;
}

// ---- runs -------------------------------------------------------------------------------------

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

#ifdef DELTASERVE_HAVE_CUDA
// The backend's decisions from the command line (--decode-gemv auto also looks at the model's width).
ds::CudaBackendOptions cuda_options(const Options& o, const ds::ModelConfig& cfg) {
  ds::CudaBackendOptions c;
  c.bf16_prefill = o.bf16_prefill;
  c.bf16_weight_copy = o.bf16_weights;
  c.split_gemv_mma = ds::decode_gemv_is_mma(o.decode_gemv, o.spec_k, cfg.n_embd);
  return c;
}

// --ablate: the production choices switched off.
ds::CudaAblations cuda_ablations(const Options& o) {
  const auto on = [&](const char* name) { return !ablated(o.ablate, name); };
  ds::CudaAblations a;
  a.prefill_gemm =
      on("cublaslt") ? ds::CudaAblations::PrefillGemm::kCublasLt : ds::CudaAblations::PrefillGemm::kMmaSync;
  a.device_logit_digest = on("device-digest");
  a.fused_decode_ops = on("fused-decode-ops");
  a.stacked_weights = on("stacked-weights");
  a.gdn_tensor_cores = on("gdn-tensor-cores");
  a.prefill_fusions = on("prefill-fusions");
  a.split_small = on("split-small");
  a.q8_split = on("q8-split");
  a.decode_pdl = on("pdl");
  return a;
}
#endif

// A backend of --backend's kind: the in-process stage's, or the vision rows' tower's.
std::unique_ptr<ds::Backend> make_backend(const Options& o, [[maybe_unused]] const ds::ModelConfig& cfg) {
#ifdef DELTASERVE_HAVE_CUDA
  if (o.backend == "cuda") return ds::make_cuda_backend(o.device, cuda_options(o, cfg), cuda_ablations(o));
#endif
  return ds::make_cpu_backend(o.threads);
}

std::unique_ptr<ds::StageModel> load_model(std::shared_ptr<const ds::GgufFile> gguf, const ds::ModelConfig& cfg,
                                           const Options& o) {
  ds::StageOptions so;
  so.n_threads = o.threads;
  so.draft_vocab = o.draft_vocab;
  so.cache.k_type = o.kv_cache.k_type();
  so.cache.v_type = o.kv_cache.v_type();
  if (!o.mmproj.empty()) so.mmproj = std::make_shared<const ds::GgufFile>(ds::GgufFile::open(o.mmproj));
  return ds::load_stage(gguf, cfg, {0, cfg.n_layer}, so, make_backend(o, cfg));
}

// Device memory in use (whole device, GiB), or a negative value on the CPU backend.
double device_used_gib(const Options& o) {
#ifdef DELTASERVE_HAVE_CUDA
  size_t free_b = 0, total_b = 0;
  if (o.backend == "cuda" && cudaMemGetInfo(&free_b, &total_b) == cudaSuccess) {
    return static_cast<double>(total_b - free_b) / (1024.0 * 1024.0 * 1024.0);
  }
#else
  (void)o;
#endif
  return -1;
}

// "device 0" in-process; "devices 0,0" for the workers (cuda: worker r on GPU r unless --devices).
std::string placement(const Options& o) {
  if (o.workers == 0) return "device " + std::to_string(o.device);
  if (o.backend != "cuda") return "cpu workers";
  std::string list;
  for (uint32_t r = 0; r < o.workers; ++r) {
    list += (r ? "," : "") + std::to_string(o.devices.empty() ? static_cast<int>(r) : o.devices[r]);
  }
  return "devices " + list;
}

void print_header(const Options& o, const ds::ModelConfig& cfg, const ModelCost& m, double load_s) {
  std::printf("model %s: %u layers (%u attention), hidden %u, vocab %u, %s embeddings\n", o.model.c_str(), cfg.n_layer,
              cfg.n_attention_layers(), cfg.n_embd, cfg.n_vocab, cfg.tied_embeddings ? "tied" : "untied");
  const char* prefill = o.backend != "cuda" ? "f32" : o.bf16_prefill ? "bf16" : "f32";  // cpu: always f32
  std::printf("backend %s (%s, threads %d, %s, prefill %s), load %.1f s, best of %d%s\n", o.backend.c_str(),
              placement(o).c_str(), o.threads,
              o.workers ? (std::to_string(o.workers) + " worker processes").c_str() : "in-process", prefill, load_s,
              o.repeat, o.warmup ? ", after a warm-up run" : "");
  const std::string kv = ds::kv_types_name(o.kv_cache.k_type(), o.kv_cache.v_type());
  std::printf("per decode token: %.3f GB weights + %.3f GB GDN state r/w + %.1f KB KV per context position (%s)\n",
              (m.decode_weight_bytes + m.expert_share * m.expert_bytes) * 1e-9, 2 * m.state_bytes * 1e-9,
              m.kv_bytes_per_pos * 1e-3, kv.c_str());
  if (cfg.moe()) {
    std::printf("  of which routed experts: %.3f GB (%u of %u per layer, of %.3f GB)\n",
                m.expert_share * m.expert_bytes * 1e-9, cfg.n_expert_used, cfg.n_expert, m.expert_bytes * 1e-9);
  }
  std::printf("per prefill token: %.2f GFLOP in matrices (+ causal attention, counted per prompt)\n",
              2 * m.matrix_params * 1e-9);
  if (wants_single(o)) {
    std::printf("%-7s %-10s %-11s %-9s %-9s %-10s %-8s %-9s %-8s\n", "prompt", "prefill_s", "pp_tok/s", "pp_TFLOP/s",
                "tg_tok/s", "tg_ms/tok", "tg_GB/s", "GB/tok", "mem_GiB");
  }
  std::fflush(stdout);
}

// The in-process stage (`model` receives it and must outlive the runner) or the pipeline.
std::unique_ptr<ds::bench::BenchRunner> make_runner(const Options& o, std::shared_ptr<const ds::GgufFile> gguf,
                                                    const ds::ModelConfig& cfg,
                                                    std::unique_ptr<ds::StageModel>& model) {
  if (o.workers == 0) {
    model = load_model(std::move(gguf), cfg, o);
    return ds::bench::make_stage_runner(*model, cfg.n_vocab);
  }
  ds::EngineOptions eo;
  eo.model_path = o.model;
  eo.n_workers = o.workers;
  eo.backend = o.backend;
  eo.threads_per_worker = o.threads;
  eo.devices = o.devices;  // used on cuda only (the engine gives cpu workers no --device)
  eo.prefill_precision = o.bf16_prefill ? "bf16" : "f32";  // sent in Assign, as serve does
  eo.decode_gemv = o.decode_gemv;
  eo.bf16_weight_copy = o.bf16_weights ? "on" : "off";
  eo.busy_poll = o.busy_poll;  // the engine passes it on to the workers it starts
  eo.mps = o.mps;
  eo.early_handoff = o.early_handoff;
  eo.cache.k_type = o.kv_cache.k_type();  // sent in Assign, as serve does
  eo.cache.v_type = o.kv_cache.v_type();
  return ds::bench::make_pipeline_runner(eo, o.pipeline_depth, o.decode_groups);
}

// --profile-decode / --profile-prefill: only the decode steps (single or batched) or only the
// prefill runs go to a profiler started with --profile-from-start off (ncu, nsys), so one kind of
// step's kernels can be summed without the other's.
enum class Phase { prefill, decode };

void profiler_range(const Options& o, Phase phase, bool start) {
#ifdef DELTASERVE_HAVE_CUDA
  const bool wanted = phase == Phase::decode ? o.profile_decode : o.profile_prefill;
  if (wanted && o.backend == "cuda") {
    if (start) {
      cudaDeviceSynchronize();
      cudaProfilerStart();
    } else {
      cudaDeviceSynchronize();
      cudaProfilerStop();
    }
  }
#else
  (void)o;
  (void)phase;
  (void)start;
#endif
}

// Through worker processes: where one run's wall time went, per step — each stage's compute (as
// its worker measured it) and the rest (transport, coordination, waiting). Printed below the row.
std::string stage_breakdown(const char* what, const ds::bench::RunStats& r) {
  if (r.stage_compute_s.empty() || r.steps == 0) return {};
  const double per_step_ms = 1e3 / static_cast<double>(r.steps);
  double compute = 0;
  std::string parts;
  for (size_t rank = 0; rank < r.stage_compute_s.size(); ++rank) {
    compute += r.stage_compute_s[rank];
    char b[48];
    std::snprintf(b, sizeof b, "%s%.3f", rank ? " + " : "", r.stage_compute_s[rank] * per_step_ms);
    parts += b;
  }
  // Negative when pipelined stages computed at the same time.
  const double outside_ms = (r.seconds - compute) * per_step_ms;
  char line[256];
  std::snprintf(line, sizeof line, "  %s per step: wall %.3f ms = stage compute %s %s %.3f ms %s (%zu steps)\n", what,
                r.seconds * per_step_ms, parts.c_str(), outside_ms >= 0 ? "+" : "-", std::fabs(outside_ms),
                outside_ms >= 0 ? "outside compute" : "of overlap", r.steps);
  return line;
}

struct PromptResult {
  ds::bench::ReportRow pp;
  ds::bench::ReportRow tg;
  std::string stages;   // stage_breakdown of the last run (worker processes only)
  double mem_gib = -1;  // device memory in use with the sequence cached (in-process cuda only)
};

// --repeat runs of prefill + decode for one prompt, each on a fresh sequence.
PromptResult measure_prompt(ds::bench::BenchRunner& runner, const Options& o, const std::vector<int32_t>& ids,
                            uint64_t& seq) {
  PromptResult r;
  r.pp.test = "pp";
  r.pp.n_prompt = ids.size();
  r.tg.test = "tg";
  r.tg.n_gen = o.gen;
  r.tg.n_depth = ids.size();
  for (int k = 0; k < o.repeat; ++k) {
    profiler_range(o, Phase::prefill, true);
    const ds::bench::RunStats p = runner.prefill(seq, ids, o.chunk);
    profiler_range(o, Phase::prefill, false);
    r.stages = stage_breakdown("prefill", p);
    r.pp.seconds.push_back(p.seconds);
    r.pp.tokens = p.tokens;
    r.pp.steps = p.steps;
    if (o.gen > 0) {
      profiler_range(o, Phase::decode, true);
      const ds::bench::RunStats d = runner.decode(seq, static_cast<uint32_t>(ids.size()), o.gen);
      profiler_range(o, Phase::decode, false);
      r.stages += stage_breakdown("decode", d);
      r.tg.seconds.push_back(d.seconds);
      r.tg.tokens = d.tokens;
      r.tg.steps = d.steps;
    }
    if (o.workers == 0) r.mem_gib = std::max(r.mem_gib, device_used_gib(o));  // the sequence is still cached here
    runner.drop(seq++);
  }
  return r;
}

void print_table_row(const PromptResult& r, const ModelCost& cost, const ds::ModelConfig& cfg, const Options& o) {
  const size_t n = r.pp.n_prompt;
  const double best_p = *std::min_element(r.pp.seconds.begin(), r.pp.seconds.end());
  const double best_d = r.tg.seconds.empty() ? 0 : *std::min_element(r.tg.seconds.begin(), r.tg.seconds.end());
  const double tflops = prefill_flops(cost, cfg, n) / best_p * 1e-12;
  const double gb_tok = decode_bytes(cost, n + o.gen / 2) * 1e-9;  // mean context of the decode run
  const double tg = best_d > 0 ? static_cast<double>(o.gen) / best_d : 0;
  char mem_s[32] = "-";
  if (r.mem_gib >= 0) std::snprintf(mem_s, sizeof mem_s, "%.2f", r.mem_gib);
  std::printf("%-7zu %-10.4f %-11.1f %-10.2f %-9.1f %-10.3f %-8.0f %-9.3f %-8s\n", n, best_p,
              static_cast<double>(n) / best_p, tflops, tg, tg > 0 ? 1e3 / tg : 0, gb_tok * tg, gb_tok, mem_s);
  std::fputs(r.stages.c_str(), stdout);
}

// The JSON rows' run description for an n-token prompt.
ds::bench::ReportContext report_context(const Options& o, size_t n) {
  return {o.model,
          o.backend,
          o.chunk ? std::min(o.chunk, n) : n,
          o.workers,
          o.threads,
          ds::kv_type_name(o.kv_cache.k_type()),
          ds::kv_type_name(o.kv_cache.v_type())};
}

void print_json_rows(PromptResult r, const ModelCost& cost, const ds::ModelConfig& cfg, const Options& o) {
  const size_t n = r.pp.n_prompt;
  const ds::bench::ReportContext ctx = report_context(o, n);
  r.pp.flop_per_run = prefill_flops(cost, cfg, n);
  r.tg.gb_per_token = decode_bytes(cost, n + o.gen / 2) * 1e-9;
  std::printf("%s\n", ds::bench::json_row(ctx, r.pp).c_str());
  if (o.gen > 0) std::printf("%s\n", ds::bench::json_row(ctx, r.tg).c_str());
}

// ---- batched decode (--parallel N > 1) --------------------------------------------------------

struct BatchResult {
  ds::bench::ReportRow tg;  // aggregate: tokens = N * steps per repetition
  double gb_per_step = 0;   // bytes the step must move at the run's mean context
  double mem_gib = -1;      // device memory in use with the N sequences cached (in-process cuda only)
  std::string stages;       // stage_breakdown of the last run (worker processes only)
};

// --repeat runs of: prefill `n_seqs` fresh sequences with `ids` one after another (untimed),
// `--gen` batched decode steps of all of them, drop them.
BatchResult measure_batch(ds::bench::BenchRunner& runner, const Options& o, const ModelCost& cost,
                          const std::vector<int32_t>& ids, size_t n_seqs, uint64_t& seq) {
  BatchResult r;
  r.tg.test = "tg";
  r.tg.n_gen = o.gen;
  r.tg.n_depth = ids.size();
  r.tg.n_parallel = n_seqs;
  r.gb_per_step = batch_decode_bytes(cost, n_seqs, ids.size() + o.gen / 2) * 1e-9;  // mean context of the run
  r.tg.gb_per_token = r.gb_per_step / static_cast<double>(n_seqs);  // each token's share: gb_per_s stays exact
  if (o.peak_gbps > 0) r.tg.limit_ts = static_cast<double>(n_seqs) * o.peak_gbps / r.gb_per_step;
  for (int k = 0; k < o.repeat; ++k) {
    std::vector<uint64_t> seqs;
    for (size_t i = 0; i < n_seqs; ++i) {
      seqs.push_back(seq++);
      runner.prefill(seqs.back(), ids, o.chunk);
    }
    profiler_range(o, Phase::decode, true);
    const ds::bench::RunStats d = runner.decode_batch(seqs, static_cast<uint32_t>(ids.size()), o.gen);
    profiler_range(o, Phase::decode, false);
    r.stages = stage_breakdown("decode", d);
    r.tg.seconds.push_back(d.seconds);
    r.tg.tokens = d.tokens;
    r.tg.steps = d.steps;
    if (o.workers == 0) r.mem_gib = std::max(r.mem_gib, device_used_gib(o));  // all N still cached here
    for (uint64_t s : seqs) runner.drop(s);
  }
  return r;
}

void print_batch_header(const Options& o) {
  char limit[64] = "no --peak-gbps: byte limit not reported";
  if (o.peak_gbps > 0) std::snprintf(limit, sizeof limit, "byte limit at %.0f GB/s", o.peak_gbps);
  std::printf("batched decode: N sequences advance one token per forward step; mean of %d runs%s; %s\n", o.repeat,
              o.warmup ? " after a warm-up run per N" : "", limit);
  std::printf("%-7s %-5s %-9s %-11s %-9s %-8s %-11s %-8s %-8s\n", "prompt", "seqs", "step_ms", "agg_tok/s", "GB/step",
              "GB/s", "limit_tok/s", "of_limit", "mem_GiB");
  std::fflush(stdout);
}

void print_batch_row(const BatchResult& r) {
  const double agg = ds::bench::rate_stats(r.tg).avg_ts;
  const double step_ms = agg > 0 ? static_cast<double>(r.tg.n_parallel) * 1e3 / agg : 0;
  char limit_s[32] = "-", frac_s[32] = "-", mem_s[32] = "-";
  if (r.tg.limit_ts > 0) {
    std::snprintf(limit_s, sizeof limit_s, "%.1f", r.tg.limit_ts);
    std::snprintf(frac_s, sizeof frac_s, "%.1f%%", 100 * agg / r.tg.limit_ts);
  }
  if (r.mem_gib >= 0) std::snprintf(mem_s, sizeof mem_s, "%.2f", r.mem_gib);
  std::printf("%-7zu %-5zu %-9.3f %-11.1f %-9.3f %-8.1f %-11s %-8s %-8s\n", r.tg.n_depth, r.tg.n_parallel, step_ms, agg,
              r.gb_per_step, step_ms > 0 ? r.gb_per_step * 1e3 / step_ms : 0, limit_s, frac_s, mem_s);
  std::fputs(r.stages.c_str(), stdout);
}

// The start-up warm-up decodes one sequence; batched steps of N rows may take other kernels
// and grow workspaces, so each N gets its own short untimed run first.
void warm_up_batches(ds::bench::BenchRunner& runner, const Options& o, uint64_t& seq) {
  for (size_t n_seqs : o.parallel) {
    if (n_seqs == 1) continue;
    std::vector<uint64_t> seqs;
    for (size_t i = 0; i < n_seqs; ++i) {
      seqs.push_back(seq++);
      runner.prefill(seqs.back(), std::vector<int32_t>(32, 1), 0);
    }
    runner.decode_batch(seqs, 32, 2);
    for (uint64_t s : seqs) runner.drop(s);
  }
}

// Every prompt length at every --parallel N > 1, after the single-sequence rows.
void run_batched(ds::bench::BenchRunner& runner, const Options& o, const ModelCost& cost,
                 const std::vector<std::vector<int32_t>>& prompts, uint64_t& seq) {
  if (o.warmup) warm_up_batches(runner, o, seq);
  if (!o.json) print_batch_header(o);
  for (const std::vector<int32_t>& ids : prompts) {
    for (size_t n_seqs : o.parallel) {
      if (n_seqs == 1) continue;
      const BatchResult r = measure_batch(runner, o, cost, ids, n_seqs, seq);
      if (o.json) {
        const ds::bench::ReportContext ctx = report_context(o, ids.size());
        std::printf("%s\n", ds::bench::json_row(ctx, r.tg).c_str());
      } else {
        print_batch_row(r);
      }
      std::fflush(stdout);
    }
  }
}

// --mmproj: the vision rows on the in-process stage (with the tower) and a tower of its own.
void run_vision(const Options& o, std::shared_ptr<const ds::GgufFile> gguf, const ds::ModelConfig& cfg) {
  const std::unique_ptr<ds::StageModel> model = load_model(std::move(gguf), cfg, o);
  const ds::GgufFile mmproj = ds::GgufFile::open(o.mmproj);
  ds::bench::VisionBenchOptions vo{o.image_sizes, o.chunk, o.repeat, o.warmup, o.json, o.mmproj, {}};
  vo.context = report_context(o, 0);
  ds::bench::run_vision_bench(*model, cfg, mmproj, *make_backend(o, cfg), vo);
}

// --http URL ...: the serving benchmark of deltaserve-bench-http (same code), with the flag
// turned into its --url.
bool wants_http(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--http") return true;
  }
  return false;
}

int run_http(int argc, char** argv) {
  std::vector<char*> args;
  static char url_flag[] = "--url";
  for (int i = 0; i < argc; ++i) args.push_back(std::string(argv[i]) == "--http" ? url_flag : argv[i]);
  return ds::bench_http::run(static_cast<int>(args.size()), args.data());
}

}  // namespace

int main(int argc, char** argv) {
  if (wants_http(argc, argv)) return run_http(argc, argv);
  const Options o = parse(argc, argv);
  try {
    auto gguf = std::make_shared<const ds::GgufFile>(ds::GgufFile::open(o.model));
    const ds::ModelConfig cfg = ds::load_model_config(*gguf);
    if (!o.mmproj.empty()) {
      run_vision(o, gguf, cfg);
      return 0;
    }
    const auto t_load = std::chrono::steady_clock::now();
    std::unique_ptr<ds::StageModel> model;  // in-process only; outlives the runner
    auto runner = make_runner(o, gguf, cfg, model);
    const double load_s = seconds_since(t_load);  // weights to the device(s) (from the page cache or disk)
    const ModelCost cost = model_cost(*gguf, cfg, o.kv_cache);
    std::mt19937 rng(42);
    if (o.warmup) {  // first kernels, first workspace allocations: outside the figures
      // 128 tokens: past the small-batch GEMM (<= 64 tokens), so the prefill GEMM's workspaces and
      // the chunked GDN scratch are allocated here too (after a 32-token warm-up the first measured
      // prompt paid for them, far below its steady speed: docs/history/performance-2026-11.md).
      runner->prefill(0, std::vector<int32_t>(128, 1), 0);
      runner->decode(0, 128, 2);
      runner->drop(0);
    }
    if (!o.json) print_header(o, cfg, cost, load_s);
    uint64_t seq = 1;
    std::vector<std::vector<int32_t>> prompts;  // the same random prompts for every N
    for (size_t n : o.prompts) {
      std::vector<int32_t> ids(n);
      for (auto& id : ids) id = static_cast<int32_t>(rng() % cfg.n_vocab);
      prompts.push_back(ids);
      if (!wants_single(o)) continue;
      const PromptResult r = measure_prompt(*runner, o, ids, seq);
      if (o.json) {
        print_json_rows(r, cost, cfg, o);
      } else {
        print_table_row(r, cost, cfg, o);
      }
      if (o.spec_k > 0) {
        const auto spec = ds::bench::measure_spec_costs(*model, cfg, ids, o.spec_k, std::max(8, 4 * o.repeat), seq++,
                                                        [&o](bool start) { profiler_range(o, Phase::decode, start); });
        ds::bench::print_spec_costs(spec, o.spec_k, ids.size(), o.json);
        model->drop_sequence(seq - 1);
      }
      std::fflush(stdout);  // keep finished rows if a later, longer prompt runs out of time
    }
    if (wants_batched(o)) run_batched(*runner, o, cost, prompts, seq);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "deltaserve-bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
