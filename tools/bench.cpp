// deltaserve-bench: prefill and decode speed of one in-process stage holding the whole model.
//
//   deltaserve-bench --model F.gguf [--prompt 512,2048] [--gen 128] [--repeat 3] [--threads T]
//
// Prompts are random token ids (fixed seed). Prefill: the prompt in one step (or --chunk N
// tokens per step), timed from submission to logits; decode: --gen steps of one token
// after a prompt of the same length, greedy. Prints one table row per prompt length; the
// figure is the best of --repeat runs (METHOD.md: report best-of with the spread).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "common/gguf.h"
#include "common/model_config.h"
#include "worker/stage_model.h"

namespace {

struct Options {
  std::string model;
  std::vector<size_t> prompts{512};
  size_t gen = 64;
  size_t chunk = 0;
  int repeat = 3;
  int threads = 2;
};

[[noreturn]] void usage(const std::string& e) {
  std::fprintf(stderr, "deltaserve-bench: %s\nusage: deltaserve-bench --model F.gguf [--prompt 512,2048] [--gen 128] "
                       "[--chunk N] [--repeat 3] [--threads T]\n", e.c_str());
  std::exit(2);
}

size_t positive(const std::string& flag, const std::string& v) {
  char* end = nullptr;
  const long n = std::strtol(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || n <= 0) usage(flag + " needs a positive integer");
  return static_cast<size_t>(n);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(a + " needs a value");
      return argv[++i];
    };
    if (a == "--model") {
      o.model = value();
    } else if (a == "--prompt") {
      o.prompts.clear();
      std::stringstream ss(value());
      std::string item;
      while (std::getline(ss, item, ',')) o.prompts.push_back(positive(a, item));
    } else if (a == "--gen") {
      o.gen = positive(a, value());
    } else if (a == "--chunk") {
      o.chunk = positive(a, value());
    } else if (a == "--repeat") {
      o.repeat = static_cast<int>(positive(a, value()));
    } else if (a == "--threads") {
      o.threads = static_cast<int>(positive(a, value()));
    } else {
      usage("unknown argument '" + a + "'");
    }
  }
  if (o.model.empty()) usage("--model is required");
  return o;
}

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

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  try {
    auto gguf = std::make_shared<const ds::GgufFile>(ds::GgufFile::open(o.model));
    const ds::ModelConfig cfg = ds::load_model_config(*gguf);
    ds::StageOptions so;
    so.n_threads = o.threads;
    auto model = ds::load_cpu_stage(gguf, cfg, {0, cfg.n_layer}, so);
    std::mt19937 rng(42);
    std::printf("model %s, backend cpu, threads %d, best of %d\n", o.model.c_str(), o.threads, o.repeat);
    std::printf("%-8s %-14s %-14s %-14s %-14s\n", "prompt", "prefill_s", "prefill_tok/s", "decode_tok/s", "decode_ms/tok");
    uint64_t seq = 1;
    for (size_t n : o.prompts) {
      std::vector<int32_t> ids(n);
      for (auto& id : ids) id = static_cast<int32_t>(rng() % cfg.n_vocab);
      double best_p = 1e30, best_d = 1e30;
      for (int r = 0; r < o.repeat; ++r) {
        best_p = std::min(best_p, prefill(*model, seq, ids, o.chunk));
        best_d = std::min(best_d, decode(*model, seq, static_cast<uint32_t>(n), o.gen, cfg.n_vocab));
        model->drop_sequence(seq++);
      }
      std::printf("%-8zu %-14.4f %-14.1f %-14.1f %-14.3f\n", n, best_p, n / best_p, o.gen / best_d, 1e3 * best_d / o.gen);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "deltaserve-bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
