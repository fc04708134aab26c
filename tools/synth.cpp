// deltaserve-synth: writes a random-weight qwen35 GGUF with the real Qwen3.5 shapes (or a
// qwen3 one with a Qwen3-Embedding / Qwen3-Reranker shape), for benchmarks and loading tests
// without downloading checkpoints.
//
//   deltaserve-synth --shape 0.8b|2b|4b|9b|27b|tiny|qwen3-{embed,rerank}-{0.6b,4b,8b} --out F.gguf [--seed S] [--vocab
//   N]
//                    [--no-mtp] [--layers N] [--threads T] [--tokenizer-from G.gguf]
//
// The tokenizer is copied from G.gguf (every tokenizer.* key, the token table padded with
// "[PAD<id>]" UNUSED tokens to the shape's vocabulary), or without the flag a built-in
// minimal byte-level one (tools/synth/tokenizer_keys.h): the file always loads as a whole
// model in deltaserve and llama.cpp. The file streams to disk (bounded memory), is the same for the same arguments
// whatever the thread count, and loads with load_model_config. Sizes: 9b ~9.5 GB, 27b ~29 GB.
#include <cstdio>
#include <exception>
#include <string>

#include "tools/cli_args.h"
#include "tools/synth/generate.h"
#include "tools/synth/shapes.h"

namespace {

struct Options {
  std::string shape;
  std::string out;
  uint64_t seed = 1;
  uint32_t vocab = 0;   // 0: the shape's
  uint32_t layers = 0;  // 0: the shape's
  bool no_mtp = false;
  int threads = 0;             // 0: all hardware threads
  std::string tokenizer_from;  // empty: the built-in minimal tokenizer
};

using ds::cli::parse_number;

const ds::cli::Usage kUsage{"deltaserve-synth",
                            "--shape 0.8b|2b|4b|9b|27b|tiny|qwen3-embed-4b|qwen3-rerank-0.6b|... --out F.gguf [--seed "
                            "S] [--vocab N] [--no-mtp] "
                            "[--layers N] [--threads T] [--tokenizer-from G.gguf]"};

Options parse(int argc, char** argv) {
  Options o;
  ds::cli::ArgReader args(kUsage, argc, argv);
  for (std::string a; args.next(a);) {
    if (a == "--shape")
      o.shape = args.value();
    else if (a == "--out")
      o.out = args.value();
    else if (a == "--seed")
      o.seed = parse_number<uint64_t>(kUsage, a, args.value(), 0);
    else if (a == "--vocab")
      o.vocab = parse_number<uint32_t>(kUsage, a, args.value(), 1, 1u << 24);
    else if (a == "--layers")
      o.layers = parse_number<uint32_t>(kUsage, a, args.value(), 1, 1024);
    else if (a == "--threads")
      o.threads = parse_number<int>(kUsage, a, args.value(), 1, 1024);
    else if (a == "--no-mtp")
      o.no_mtp = true;
    else if (a == "--tokenizer-from")
      o.tokenizer_from = args.value();
    else
      args.unknown();
  }
  if (o.shape.empty()) kUsage.fail("--shape is required");
  if (o.out.empty()) kUsage.fail("--out is required");
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  try {
    ds::synth::SynthShape shape = ds::synth::shape_by_name(o.shape);
    if (o.vocab) shape.n_vocab = o.vocab;
    if (o.layers) shape.n_layer = o.layers;
    if (o.no_mtp) shape.n_nextn = 0;
    const ds::synth::SynthSummary s = ds::synth::write_synth_gguf(shape, o.out, o.seed, o.threads, o.tokenizer_from);
    std::printf("%s: %s %s, %u layers + %u MTP, vocab %u, %zu tensors, %.3f B params, %.2f GB, %.1f s\n", o.out.c_str(),
                shape.arch.c_str(), shape.name.c_str(), shape.n_layer, shape.n_nextn, shape.n_vocab, s.n_tensors,
                static_cast<double>(s.n_params) * 1e-9, static_cast<double>(s.file_bytes) * 1e-9, s.seconds);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "deltaserve-synth: %s\n", e.what());
    return 1;
  }
  return 0;
}
