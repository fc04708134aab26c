// deltaserve-logits: runs the forward pass on a token list and prints one JSON object with
// the logit digest (top-16 ids + logits, log-sum-exp) of the last position, of every position
// (--all-positions) or of the MTP rows (--mtp). This is the stable interface every backend and
// deployment shape is checked against the reference with.
//
//   deltaserve-logits --model F.gguf --ids 1,2,3 [--all-positions] [--mtp] [--chunk N]
//                     [--out FILE.f32] [--threads T] [--backend cpu|cuda] [--device N]
//                     [--workers N]   (N > 0: through N real worker processes over ZeroMQ)
//                     [--kv-cache-type T] [--kv-cache-type-k T] [--kv-cache-type-v T]
//                                     (the KV cache's element types, common/kv_options.h)
#include <cstdio>
#include <exception>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "common/gguf.h"
#include "common/model_config.h"
#include "coordinator/engine/engine.h"
#include "kernels/cpu/digest.h"
#include "tools/cli_args.h"
#include "worker/stage_model.h"
#ifdef DELTASERVE_HAVE_CUDA
#include "worker/cuda_backend.h"
#endif

namespace {

struct Options {
  std::string model;
  std::vector<int32_t> ids;
  bool all_positions = false;
  bool mtp = false;
  size_t chunk = 0;  // 0: the whole prompt in one step
  std::string out;
  int threads = 2;
  std::string backend = "cpu";                             // cpu | cuda
  int device = 0;                                          // CUDA device for --backend cuda
  uint32_t workers = 0;                                    // 0: in-process; N: N deltaserve-worker processes (pipeline)
  ds::KvTypeFlags kv_cache{{}, {}, {}, ds::KvType::kF32};  // --kv-cache-type[-k|-v]; f32 unset (exact logits)
};

using ds::cli::parse_number;

const ds::cli::Usage kUsage{"deltaserve-logits",
                            "--model F.gguf --ids 1,2,3 [--all-positions] [--mtp] [--chunk N] [--out FILE.f32] "
                            "[--threads T] [--backend cpu|cuda] [--device N] [--workers N] [--kv-cache-type T] "
                            "[--kv-cache-type-k T] [--kv-cache-type-v T]"};

Options parse_args(int argc, char** argv) {
  Options o;
  ds::cli::ArgReader args(kUsage, argc, argv);
  for (std::string a; args.next(a);) {
    if (a == "--model")
      o.model = args.value();
    else if (a == "--ids")
      o.ids = ds::cli::parse_list<int32_t>(kUsage, a, args.value(), 0);
    else if (a == "--all-positions")
      o.all_positions = true;
    else if (a == "--mtp")
      o.mtp = true;
    else if (a == "--chunk")
      o.chunk = parse_number<size_t>(kUsage, a, args.value(), 1);
    else if (a == "--out")
      o.out = args.value();
    else if (a == "--threads")
      o.threads = parse_number<int>(kUsage, a, args.value(), 1);
    else if (a == "--backend")
      o.backend = args.value();
    else if (a == "--device")
      o.device = parse_number<int>(kUsage, a, args.value(), 0, 0xFFFF);
    else if (a == "--workers")
      o.workers = parse_number<uint32_t>(kUsage, a, args.value(), 1);
    else if (!ds::cli::kv_cache_flag(kUsage, a, args, &o.kv_cache))
      args.unknown();
  }
  if (o.model.empty()) kUsage.fail("--model is required");
  if (o.ids.empty()) kUsage.fail("--ids is required");
  if (o.mtp && o.ids.size() < 2) kUsage.fail("--mtp needs at least 2 ids");
  if (o.workers > 0 && o.mtp) kUsage.fail("--mtp is not available with --workers yet");
  if (o.backend != "cpu" && o.backend != "cuda") kUsage.fail("--backend must be cpu or cuda, got '" + o.backend + "'");
#ifndef DELTASERVE_HAVE_CUDA
  if (o.backend == "cuda")
    kUsage.fail("--backend cuda: this build has no CUDA support (configure with -DDELTASERVE_CUDA=ON)");
#endif
  return o;
}

// One step's share of the prompt.
struct PromptChunk {
  uint32_t start_pos = 0;
  std::vector<int32_t> tokens;
  std::vector<uint32_t> rows;  // the requested positions inside the chunk, relative to start_pos
};

// The prompt cut into --chunk pieces (one piece without --chunk); `wanted` (ascending
// positions) is dealt out to the pieces holding each position.
std::vector<PromptChunk> prompt_chunks(const Options& o, const std::vector<size_t>& wanted) {
  std::vector<PromptChunk> chunks;
  const size_t chunk = o.chunk ? o.chunk : o.ids.size();
  size_t w = 0;
  for (size_t begin = 0; begin < o.ids.size(); begin += chunk) {
    const size_t end = std::min(o.ids.size(), begin + chunk);
    PromptChunk c;
    c.start_pos = static_cast<uint32_t>(begin);
    c.tokens.assign(o.ids.begin() + static_cast<std::ptrdiff_t>(begin),
                    o.ids.begin() + static_cast<std::ptrdiff_t>(end));
    for (; w < wanted.size() && wanted[w] < end; ++w) c.rows.push_back(static_cast<uint32_t>(wanted[w] - begin));
    chunks.push_back(std::move(c));
  }
  return chunks;
}

// Runs the prompt through a single in-process stage, chunk by chunk. Returns logits of the
// requested rows ([n_rows, V]) and, when `final_hidden` is given, their final-normed hidden.
std::vector<float> run_prompt(ds::StageModel& model, const Options& o, const std::vector<size_t>& wanted,
                              std::vector<float>* final_hidden) {
  std::vector<float> logits;
  for (PromptChunk& c : prompt_chunks(o, wanted)) {
    ds::StepInput in;
    ds::SeqStep s;
    s.seq_id = 1;
    s.start_pos = c.start_pos;
    s.token_ids = std::move(c.tokens);
    s.logit_rows = std::move(c.rows);
    in.seqs.push_back(std::move(s));
    ds::StepOutput out;
    model.forward(in, &out);
    logits.insert(logits.end(), out.logits.begin(), out.logits.end());
    if (final_hidden) final_hidden->insert(final_hidden->end(), out.final_hidden.begin(), out.final_hidden.end());
  }
  return logits;
}

void print_digests(const std::vector<float>& logits, size_t vocab) {
  std::printf("{\"positions\": [");
  const size_t n = logits.size() / vocab;
  for (size_t r = 0; r < n; ++r) {
    const ds::cpu::LogitDigest d = ds::cpu::logit_digest(logits.data() + r * vocab, vocab, 16);
    std::printf("%s{\"top_ids\": [", r ? ", " : "");
    for (size_t i = 0; i < d.top_ids.size(); ++i) std::printf("%s%d", i ? ", " : "", d.top_ids[i]);
    std::printf("], \"top_logits\": [");
    for (size_t i = 0; i < d.top_logits.size(); ++i)
      std::printf("%s%.9g", i ? ", " : "", static_cast<double>(d.top_logits[i]));
    std::printf("], \"logsumexp\": %.17g}", d.logsumexp);
  }
  std::printf("]}\n");
}

// Runs the prompt through `o.workers` worker processes (the real multi-process pipeline),
// chunk by chunk, returning the full logits of the requested rows.
std::vector<float> run_prompt_workers(const Options& o, const std::vector<size_t>& wanted) {
  ds::EngineOptions eo;
  eo.model_path = o.model;
  eo.n_workers = o.workers;
  eo.backend = o.backend;
  eo.threads_per_worker = o.threads;
  eo.cache.k_type = o.kv_cache.k_type();  // sent in Assign
  eo.cache.v_type = o.kv_cache.v_type();
  ds::PipelineEngine engine(eo);
  engine.start();
  std::vector<float> logits;
  for (PromptChunk& c : prompt_chunks(o, wanted)) {
    ds::SeqRequest r;
    r.seq_id = 1;
    r.start_pos = c.start_pos;
    r.tokens = std::move(c.tokens);
    r.logit_rows = std::move(c.rows);
    r.random_u.assign(r.logit_rows.size(), 0.0);
    r.return_full_logits = true;
    const ds::StepOutcome out = engine.step({r});
    for (const ds::RowResult& row : out.rows) logits.insert(logits.end(), row.logits.begin(), row.logits.end());
  }
  engine.shutdown();
  return logits;
}

// The whole model as one stage on the chosen backend.
std::unique_ptr<ds::StageModel> load_model(std::shared_ptr<const ds::GgufFile> gguf, const ds::ModelConfig& cfg,
                                           const ds::StageOptions& so, const Options& o) {
#ifdef DELTASERVE_HAVE_CUDA
  if (o.backend == "cuda") return ds::load_stage(gguf, cfg, {0, cfg.n_layer}, so, ds::make_cuda_backend(o.device));
#else
  (void)o;  // --backend cuda was already rejected by parse_args
#endif
  return ds::load_cpu_stage(gguf, cfg, {0, cfg.n_layer}, so);
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse_args(argc, argv);
  try {
    auto gguf = std::make_shared<const ds::GgufFile>(ds::GgufFile::open(o.model));
    const ds::ModelConfig cfg = ds::load_model_config(*gguf);
    ds::StageOptions so;
    so.n_threads = o.threads;
    so.cache.k_type = o.kv_cache.k_type();
    so.cache.v_type = o.kv_cache.v_type();
    std::vector<size_t> wanted;
    const size_t T = o.ids.size();
    if (o.mtp) {
      for (size_t t = 0; t + 1 < T; ++t) wanted.push_back(t);
    } else if (o.all_positions) {
      for (size_t t = 0; t < T; ++t) wanted.push_back(t);
    } else {
      wanted.push_back(T - 1);
    }
    std::vector<float> hidden;
    std::unique_ptr<ds::StageModel> model;
    std::vector<float> logits;
    if (o.workers > 0) {
      logits = run_prompt_workers(o, wanted);
    } else {
      model = load_model(gguf, cfg, so, o);
      logits = run_prompt(*model, o, wanted, o.mtp ? &hidden : nullptr);
    }
    if (o.mtp) {
      // Row t = (final-normed hidden at t, token ids[t+1]) at position t: predicts ids[t+2].
      std::vector<int32_t> next(o.ids.begin() + 1, o.ids.end());
      model->forward_mtp(1, 0, next, hidden.data(), &logits);
    }
    print_digests(logits, cfg.n_vocab);
    if (!o.out.empty()) {
      std::ofstream f(o.out, std::ios::binary | std::ios::trunc);
      f.write(reinterpret_cast<const char*>(logits.data()),
              static_cast<std::streamsize>(logits.size() * sizeof(float)));
      if (!f) throw std::runtime_error("cannot write " + o.out);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "deltaserve-logits: %s\n", e.what());
    return 1;
  }
  return 0;
}
