// deltaserve-bench: prefill and decode speed of one in-process stage holding the whole model.
//
//   deltaserve-bench --model F.gguf [--backend cpu|cuda] [--device N] [--prompt 512,2048,8192]
//                    [--gen 128] [--chunk N] [--repeat 3] [--threads T] [--no-warmup]
//
// Prompts are random token ids (fixed seed). Prefill: the prompt in one step (or --chunk N
// tokens per step), timed from submission to logits on the host; decode: --gen greedy steps of
// one token right after the prompt (so "tg128 at context n"; --gen 0 skips it). Every forward
// ends by downloading logits, which waits for the device stream, so host wall time is device
// time plus the host's share. A short warm-up run goes first (module load, first allocations).
// Each figure is the best of --repeat runs (METHOD.md: report best-of with the spread).
//
// Roofline context: weight bytes streamed per decode token (every main-stack weight, the LM
// head, one embedding row) plus f32 GDN state read+write and f32 KV read at that context, and
// FLOPs per prefill token (2 per matrix weight plus causal attention), each with the rate the
// measured time implies. Compare with the device's measured ceilings (H200: ~4.3 TB/s copy,
// ~790 TFLOP/s bf16 dense).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/gguf.h"
#include "common/model_config.h"
#include "tools/cli_args.h"
#include "worker/stage_model.h"
#ifdef DELTASERVE_HAVE_CUDA
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
  bool bf16_prefill = false;  // --bf16-prefill: tensor-core prefill products (cuda, opt-in)
  int device = 0;
  bool warmup = true;
};

using ds::cli::parse_number;

const ds::cli::Usage kUsage{"deltaserve-bench",
                            "--model F.gguf [--backend cpu|cuda] [--device N] [--bf16-prefill] [--prompt 512,2048] [--gen 128] "
                            "[--chunk N] [--repeat 3] [--threads T] [--no-warmup]"};

Options parse(int argc, char** argv) {
  Options o;
  ds::cli::ArgReader args(kUsage, argc, argv);
  for (std::string a; args.next(a);) {
    if (a == "--model") {
      o.model = args.value();
    } else if (a == "--prompt") {
      o.prompts = ds::cli::parse_list<size_t>(kUsage, a, args.value(), 1);
    } else if (a == "--gen") {
      o.gen = parse_number<size_t>(kUsage, a, args.value(), 0);
    } else if (a == "--chunk") {
      o.chunk = parse_number<size_t>(kUsage, a, args.value(), 1);
    } else if (a == "--repeat") {
      o.repeat = parse_number<int>(kUsage, a, args.value(), 1);
    } else if (a == "--threads") {
      o.threads = parse_number<int>(kUsage, a, args.value(), 1);
    } else if (a == "--backend") {
      o.backend = args.value();
    } else if (a == "--device") {
      o.device = parse_number<int>(kUsage, a, args.value(), 0);
    } else if (a == "--no-warmup") {
      o.warmup = false;
    } else if (a == "--bf16-prefill") {
      o.bf16_prefill = true;
    } else {
      args.unknown();
    }
  }
  if (o.model.empty()) kUsage.fail("--model is required");
  if (o.backend != "cpu" && o.backend != "cuda") kUsage.fail("--backend must be cpu or cuda, got '" + o.backend + "'");
#ifndef DELTASERVE_HAVE_CUDA
  if (o.backend == "cuda") kUsage.fail("--backend cuda: this build has no CUDA support (configure with -DDELTASERVE_CUDA=ON)");
#endif
  return o;
}

// ---- roofline bookkeeping ---------------------------------------------------------------------

struct ModelCost {
  double decode_weight_bytes = 0;  // streamed once per decode step (batch 1)
  double matrix_params = 0;        // main-stack + LM-head matrices: 2 FLOP each per token
  double head_params = 0;          // LM head alone (prefill needs it for one row only)
  double kv_bytes_per_pos = 0;     // f32 K+V of all attention layers, per cached position
  double state_bytes = 0;          // f32 GDN conv + recurrent state of one sequence
};

bool in_main_stack(const std::string& name, uint32_t n_layer) {
  if (name.rfind("blk.", 0) != 0) return false;
  return std::strtoul(name.c_str() + 4, nullptr, 10) < n_layer;  // MTP blocks are not executed
}

ModelCost model_cost(const ds::GgufFile& g, const ds::ModelConfig& c) {
  ModelCost m;
  for (const ds::GgufTensor& t : g.tensors()) {
    if (!in_main_stack(t.name, c.n_layer)) continue;
    m.decode_weight_bytes += static_cast<double>(t.nbytes);
    if (t.n_dims == 2 && t.type != ds::GgmlType::F32) m.matrix_params += static_cast<double>(t.n_elements());
  }
  const ds::GgufTensor& head = g.tensor(c.tied_embeddings ? "token_embd.weight" : "output.weight");
  const ds::GgufTensor& embd = g.tensor("token_embd.weight");
  m.head_params = static_cast<double>(head.n_elements());
  m.decode_weight_bytes += static_cast<double>(head.nbytes + embd.row_bytes() + g.tensor("output_norm.weight").nbytes);
  m.kv_bytes_per_pos = 4.0 * c.n_attention_layers() * 2 * c.n_head_kv * c.head_dim;
  const double gdn_layers = c.n_layer - c.n_attention_layers();
  const double per_layer = (c.ssm_conv_kernel - 1.0) * c.ssm_conv_channels() +
                           static_cast<double>(c.ssm_dt_rank) * c.ssm_d_state * c.ssm_head_v_dim();
  m.state_bytes = 4.0 * gdn_layers * per_layer;
  return m;
}

// Prefill FLOPs of an n-token prompt: matrices for every token, the LM head for the last one,
// causal attention (QK^T and PV: 4*H*d per query-key pair, keys 1..t for token t).
double prefill_flops(const ModelCost& m, const ds::ModelConfig& c, size_t n) {
  const double pairs = 0.5 * static_cast<double>(n) * static_cast<double>(n + 1);
  return 2.0 * (m.matrix_params * static_cast<double>(n) + m.head_params) +
         4.0 * c.n_head * c.head_dim * c.n_attention_layers() * pairs;
}

// Bytes one decode step must read (weights, state read+write, K/V of `ctx` positions).
double decode_bytes(const ModelCost& m, size_t ctx) {
  return m.decode_weight_bytes + 2.0 * m.state_bytes + m.kv_bytes_per_pos * static_cast<double>(ctx);
}

// ---- runs -------------------------------------------------------------------------------------

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Prefills `ids` as sequence `seq`, returning the seconds taken.
double prefill(ds::StageModel& m, uint64_t seq, const std::vector<int32_t>& ids, size_t chunk) {
  const auto t0 = std::chrono::steady_clock::now();
  if (chunk == 0) chunk = ids.size();
  for (size_t b = 0; b < ids.size(); b += chunk) {
    const size_t e = std::min(ids.size(), b + chunk);
    ds::StepInput in;
    ds::SeqStep s{seq, static_cast<uint32_t>(b), std::vector<int32_t>(ids.begin() + static_cast<std::ptrdiff_t>(b), ids.begin() + static_cast<std::ptrdiff_t>(e)), {}};
    if (e == ids.size()) s.logit_rows.push_back(static_cast<uint32_t>(e - b - 1));
    in.seqs.push_back(std::move(s));
    ds::StepOutput out;
    m.forward(in, &out);
  }
  return seconds_since(t0);
}

// `n` greedy steps after `start` positions; the argmax over the downloaded logits is part of
// the per-token cost, as it is for a real batch-1 sampler.
double decode(ds::StageModel& m, uint64_t seq, uint32_t start, size_t n, size_t vocab) {
  int32_t tok = 1;
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t i = 0; i < n; ++i) {
    ds::StepInput in;
    in.seqs.push_back({seq, static_cast<uint32_t>(start + i), {tok}, {0}});
    ds::StepOutput out;
    m.forward(in, &out);
    tok = static_cast<int32_t>(std::max_element(out.logits.begin(), out.logits.begin() + static_cast<std::ptrdiff_t>(vocab)) - out.logits.begin());
  }
  return seconds_since(t0);
}

std::unique_ptr<ds::StageModel> load_model(std::shared_ptr<const ds::GgufFile> gguf, const ds::ModelConfig& cfg,
                                           const Options& o) {
  ds::StageOptions so;
  so.n_threads = o.threads;
#ifdef DELTASERVE_HAVE_CUDA
  if (o.backend == "cuda") return ds::load_stage(gguf, cfg, {0, cfg.n_layer}, so, ds::make_cuda_backend(o.device, o.bf16_prefill));
#endif
  return ds::load_cpu_stage(gguf, cfg, {0, cfg.n_layer}, so);
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

void print_header(const Options& o, const ds::ModelConfig& cfg, const ModelCost& m, double load_s) {
  std::printf("model %s: %u layers (%u attention), hidden %u, vocab %u, %s embeddings\n", o.model.c_str(), cfg.n_layer,
              cfg.n_attention_layers(), cfg.n_embd, cfg.n_vocab, cfg.tied_embeddings ? "tied" : "untied");
  std::printf("backend %s (device %d, threads %d), load %.1f s, best of %d%s\n", o.backend.c_str(), o.device, o.threads,
              load_s, o.repeat, o.warmup ? ", after a warm-up run" : "");
  std::printf("per decode token: %.3f GB weights + %.3f GB GDN state r/w + %.1f KB KV per context position (f32)\n",
              m.decode_weight_bytes * 1e-9, 2 * m.state_bytes * 1e-9, m.kv_bytes_per_pos * 1e-3);
  std::printf("per prefill token: %.2f GFLOP in matrices (+ causal attention, counted per prompt)\n",
              2 * m.matrix_params * 1e-9);
  std::printf("%-7s %-10s %-11s %-9s %-9s %-10s %-8s %-9s %-8s\n", "prompt", "prefill_s", "pp_tok/s", "pp_TFLOP/s",
              "tg_tok/s", "tg_ms/tok", "tg_GB/s", "GB/tok", "mem_GiB");
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  try {
    auto gguf = std::make_shared<const ds::GgufFile>(ds::GgufFile::open(o.model));
    const ds::ModelConfig cfg = ds::load_model_config(*gguf);
    const auto t_load = std::chrono::steady_clock::now();
    auto model = load_model(gguf, cfg, o);
    const double load_s = seconds_since(t_load);  // weights to the device (from the page cache or disk)
    const ModelCost cost = model_cost(*gguf, cfg);
    std::mt19937 rng(42);
    if (o.warmup) {  // first kernels, first workspace allocations: outside the figures
      std::vector<int32_t> ids(32, 1);
      prefill(*model, 0, ids, 0);
      decode(*model, 0, 32, 2, cfg.n_vocab);
      model->drop_sequence(0);
    }
    print_header(o, cfg, cost, load_s);
    uint64_t seq = 1;
    for (size_t n : o.prompts) {
      std::vector<int32_t> ids(n);
      for (auto& id : ids) id = static_cast<int32_t>(rng() % cfg.n_vocab);
      double best_p = 1e30, best_d = 1e30, mem = -1;
      for (int r = 0; r < o.repeat; ++r) {
        best_p = std::min(best_p, prefill(*model, seq, ids, o.chunk));
        if (o.gen > 0) best_d = std::min(best_d, decode(*model, seq, static_cast<uint32_t>(n), o.gen, cfg.n_vocab));
        mem = std::max(mem, device_used_gib(o));  // the sequence's KV and state are still held here
        model->drop_sequence(seq++);
      }
      const double tflops = prefill_flops(cost, cfg, n) / best_p * 1e-12;
      const double gb_tok = decode_bytes(cost, n + o.gen / 2) * 1e-9;  // mean context of the decode run
      const double tg = o.gen > 0 ? static_cast<double>(o.gen) / best_d : 0;
      char mem_s[32] = "-";
      if (mem >= 0) std::snprintf(mem_s, sizeof mem_s, "%.2f", mem);
      std::printf("%-7zu %-10.4f %-11.1f %-10.2f %-9.1f %-10.3f %-8.0f %-9.3f %-8s\n", n, best_p,
                  static_cast<double>(n) / best_p, tflops, tg, tg > 0 ? 1e3 / tg : 0, gb_tok * tg, gb_tok, mem_s);
      std::fflush(stdout);  // keep finished rows if a later, longer prompt runs out of time
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "deltaserve-bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
