// deltaserve-perplexity: the perplexity of a text under a model, and the KL divergence of this
// run's next-token distributions against a saved base run (what llama-perplexity
// --kl-divergence gives llama.cpp users): measure a fast path (cuda, bf16 prefill) against the
// f32 CPU path.
//
//   deltaserve-perplexity --model F.gguf (--file TEXT | --ids FILE) [--ctx N]
//                         [--save-base BASE.bin | --kl-base BASE.bin] [--backend cpu|cuda] [--device N]
//                         [--threads T] [--prefill-precision bf16|f32] [--bf16-weights]
//                         [--decode-gemv auto|dp4a|mma] [--chunk N]
//                         [--kv-cache-type T] [--kv-cache-type-k T] [--kv-cache-type-v T]
//
// The ids (the text tokenized literally, no special tokens added; or the ids file) are cut into
// windows of --ctx tokens, each a fresh sequence; within a window every position after the
// first predicts the next token, and ppl = exp(mean over all predicted positions of
// -log softmax(logits)[next id]) (tools/perplexity_core.h, which also gives the base file format
// and its error bound). Prints a few human lines, then one JSON line. Exit status 2 for a usage
// error, 1 for a runtime one.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "common/gguf.h"
#include "common/kv_options.h"
#include "common/model_config.h"
#include "coordinator/tokenizer/tokenizer.h"
#include "tools/cli_args.h"
#include "tools/perplexity_core.h"
#include "worker/decode_gemv.h"
#include "worker/stage_model.h"
#ifdef DELTASERVE_HAVE_CUDA
#include "worker/cuda_backend.h"
#endif

namespace {

struct Options {
  std::string model;
  std::string text_file;  // --file: text, tokenized with the model's tokenizer
  std::string ids_file;   // --ids: a JSON array or whitespace-separated ids
  ds::ppl::Options ppl;
  size_t chunk = 512;  // tokens per forward step: bounds the logits held at once (rows x vocabulary)
  int threads = 2;
  std::string backend = "cpu";  // cpu | cuda
  int device = 0;
  bool bf16_prefill = true;  // --prefill-precision (cuda; the CPU always computes in f32)
  bool bf16_weights = false;
  std::string decode_gemv = "auto";
  // --kv-cache-type[-k|-v]: measure a quantized KV cache against an f32 base (f32 when unset)
  ds::KvTypeFlags kv_cache{{}, {}, {}, ds::KvType::kF32};
};

using ds::cli::parse_number;

const ds::cli::Usage kUsage{"deltaserve-perplexity",
                            "--model F.gguf (--file TEXT | --ids FILE) [--ctx N] [--save-base BASE.bin | --kl-base "
                            "BASE.bin] [--backend cpu|cuda] [--device N] [--threads T] [--prefill-precision bf16|f32] "
                            "[--bf16-weights] [--decode-gemv auto|dp4a|mma] [--chunk N] [--kv-cache-type T] "
                            "[--kv-cache-type-k T] [--kv-cache-type-v T]"};

[[noreturn]] void help() {
  std::printf(
      "usage: %s %s\n\n"
      "  --file TEXT     plain text, tokenized with the model's tokenizer (literally, no special tokens)\n"
      "  --ids FILE      token ids: a JSON array or whitespace-separated integers\n"
      "  --ctx N         window length (default: the whole input as one window, capped by the model context).\n"
      "                  Each window is a fresh sequence; every position after its first predicts the next\n"
      "                  token: ppl = exp(mean over all predicted positions of -log softmax(logits)[next id])\n"
      "  --save-base F   write this run's log-probs (f16; exact nll and argmax) for a later --kl-base\n"
      "  --kl-base F     report KL(base || this run) mean, p99 and max, top-1 agreement, base ppl, delta ppl;\n"
      "                  a base from another model, other ids or another --ctx is refused\n"
      "  --chunk N       tokens per forward step (default 512; the logits held are N x vocabulary floats)\n"
      "  --backend, --device, --threads, --prefill-precision, --bf16-weights, --decode-gemv: as deltaserve-bench\n"
      "                  (the CPU backend always computes in f32)\n"
      "  --kv-cache-type T, --kv-cache-type-k T, --kv-cache-type-v T\n"
      "                  the KV cache's element types (K and V, or one side), T one of %s; default %s\n"
      "Prints a few lines, then one JSON line (ppl, n_positions, and the KL figures with --kl-base).\n",
      kUsage.tool, kUsage.synopsis, ds::kKvTypeNames, ds::kv_type_name(ds::KvType::kF32));
  std::exit(0);
}

void parse_flag(const std::string& a, ds::cli::ArgReader& args, Options& o) {
  if (a == "--model") {
    o.model = args.value();
  } else if (a == "--file") {
    o.text_file = args.value();
  } else if (a == "--ids") {
    o.ids_file = args.value();
  } else if (a == "--ctx") {
    o.ppl.ctx = parse_number<size_t>(kUsage, a, args.value(), 2, 1u << 24);
  } else if (a == "--save-base") {
    o.ppl.save_base = args.value();
  } else if (a == "--kl-base") {
    o.ppl.kl_base = args.value();
  } else if (a == "--chunk") {
    o.chunk = parse_number<size_t>(kUsage, a, args.value(), 1, 1u << 24);
  } else if (a == "--threads") {
    o.threads = parse_number<int>(kUsage, a, args.value(), 1, 1024);
  } else if (a == "--backend") {
    o.backend = args.value();
  } else if (a == "--device") {
    o.device = parse_number<int>(kUsage, a, args.value(), 0, 0xFFFF);
  } else if (a == "--prefill-precision") {
    const std::string v = args.value();
    if (v != "bf16" && v != "f32") kUsage.fail("--prefill-precision must be bf16 or f32, got '" + v + "'");
    o.bf16_prefill = v == "bf16";
  } else if (a == "--bf16-weights") {
    o.bf16_weights = true;
  } else if (a == "--decode-gemv") {
    o.decode_gemv = args.value();
    if (o.decode_gemv != "auto" && o.decode_gemv != "dp4a" && o.decode_gemv != "mma")
      kUsage.fail("--decode-gemv must be auto, dp4a or mma, got '" + o.decode_gemv + "'");
  } else if (a == "--help" || a == "-h") {
    help();
  } else if (!ds::cli::kv_cache_flag(kUsage, a, args, &o.kv_cache)) {
    args.unknown();
  }
}

Options parse_args(int argc, char** argv) {
  Options o;
  ds::cli::ArgReader args(kUsage, argc, argv);
  for (std::string a; args.next(a);) parse_flag(a, args, o);
  if (o.model.empty()) kUsage.fail("--model is required");
  if (o.text_file.empty() == o.ids_file.empty()) kUsage.fail("give exactly one of --file and --ids");
  if (!o.ppl.save_base.empty() && !o.ppl.kl_base.empty())
    kUsage.fail("give --save-base or --kl-base, not both (save the base in a run of its own)");
  if (o.backend != "cpu" && o.backend != "cuda") kUsage.fail("--backend must be cpu or cuda, got '" + o.backend + "'");
#ifndef DELTASERVE_HAVE_CUDA
  if (o.backend == "cuda")
    kUsage.fail("--backend cuda: this build has no CUDA support (configure with -DDELTASERVE_CUDA=ON)");
#endif
  return o;
}

std::string read_file(const std::string& path, const char* what) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw ds::ppl::PplError(std::string("cannot open ") + what + " '" + path + "'");
  std::ostringstream s;
  s << f.rdbuf();
  if (f.bad()) throw ds::ppl::PplError(std::string("cannot read ") + what + " '" + path + "'");
  return s.str();
}

// The ids to evaluate: --ids parsed, or --file tokenized literally (control tokens as text).
std::vector<int32_t> input_ids(const Options& o, const ds::GgufFile& gguf) {
  if (!o.ids_file.empty()) return ds::ppl::parse_ids(read_file(o.ids_file, "ids file"));
  const std::string text = read_file(o.text_file, "text file");
  const std::vector<int32_t> ids = ds::Tokenizer(gguf).encode(text, /*parse_control=*/false);
  if (ids.empty()) throw ds::ppl::PplError("the text file '" + o.text_file + "' tokenizes to no tokens");
  return ids;
}

std::unique_ptr<ds::StageModel> load_model(std::shared_ptr<const ds::GgufFile> gguf, const ds::ModelConfig& cfg,
                                           const Options& o) {
  ds::StageOptions so;
  so.n_threads = o.threads;
  so.cache.k_type = o.kv_cache.k_type();
  so.cache.v_type = o.kv_cache.v_type();
#ifdef DELTASERVE_HAVE_CUDA
  if (o.backend == "cuda") {
    ds::CudaBackendOptions c;
    c.bf16_prefill = o.bf16_prefill;
    c.bf16_weight_copy = o.bf16_weights;
    c.split_gemv_mma = ds::decode_gemv_is_mma(o.decode_gemv, 0, cfg.n_embd);
    return ds::load_stage(gguf, cfg, {0, cfg.n_layer}, so, ds::make_cuda_backend(o.device, c));
  }
#endif
  return ds::load_cpu_stage(gguf, cfg, {0, cfg.n_layer}, so);
}

// --ctx, or the whole input, capped by the model's context (0 = unknown: no cap).
size_t window_length(const Options& o, size_t n_ids, const ds::ModelConfig& cfg) {
  const size_t cap = cfg.context_length;
  if (o.ppl.ctx && cap && o.ppl.ctx > cap)
    throw ds::ppl::PplError("--ctx " + std::to_string(o.ppl.ctx) + " is more than the model's context of " +
                            std::to_string(cap));
  if (o.ppl.ctx) return o.ppl.ctx;
  return cap && n_ids > cap ? cap : 0;
}

void print_report(const Options& o, const ds::ppl::Report& r, size_t n_ids, double seconds) {
  const char* prefill = o.backend != "cuda" ? "f32" : o.bf16_prefill ? "bf16" : "f32";
  const std::string kv = ds::kv_types_name(o.kv_cache.k_type(), o.kv_cache.v_type());
  std::printf(
      "model %s, backend %s (prefill %s, KV cache %s), %zu ids in %zu window(s) of %zu, %zu predicted positions, "
      "%.2f s\n",
      o.model.c_str(), o.backend.c_str(), prefill, kv.c_str(), n_ids, r.n_windows, r.ctx, r.n_positions, seconds);
  std::printf("ppl %.6f\n", r.ppl);
  if (!o.ppl.save_base.empty()) std::printf("base saved to %s\n", o.ppl.save_base.c_str());
  if (r.has_kl) {
    std::printf("base ppl %.6f, delta ppl %+.6g (%+.4g%%)\n", r.base_ppl, r.ppl - r.base_ppl,
                100.0 * (r.ppl - r.base_ppl) / r.base_ppl);
    std::printf("KL(base || run) mean %.6g, p99 %.6g, max %.6g; top-1 agreement %.4f%%\n", r.kl_mean, r.kl_p99,
                r.kl_max, r.top1_pct);
  }
  std::printf("%s\n", ds::ppl::report_json(r).c_str());
}

}  // namespace

int main(int argc, char** argv) {
  Options o = parse_args(argc, argv);
  try {
    const auto t0 = std::chrono::steady_clock::now();
    auto gguf = std::make_shared<const ds::GgufFile>(ds::GgufFile::open(o.model));
    const ds::ModelConfig cfg = ds::load_model_config(*gguf);
    const std::vector<int32_t> ids = input_ids(o, *gguf);
    o.ppl.ctx = window_length(o, ids.size(), cfg);
    if (!o.ppl.kl_base.empty()) {  // a mismatching base is refused before the model is loaded
      const ds::ppl::BaseReader check(o.ppl.kl_base, ds::ppl::base_header_for(ids, cfg.n_vocab, o.ppl.ctx));
    }
    std::unique_ptr<ds::StageModel> model = load_model(gguf, cfg, o);
    ds::ppl::Report r = ds::ppl::evaluate(ids, cfg.n_vocab, o.ppl, ds::ppl::stage_logits(*model, o.chunk));
    r.type_k = ds::kv_type_name(o.kv_cache.k_type());
    r.type_v = ds::kv_type_name(o.kv_cache.v_type());
    print_report(o, r, ids.size(), std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "deltaserve-perplexity: %s\n", e.what());
    return 1;
  }
  return 0;
}
