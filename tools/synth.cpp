// deltaserve-synth: writes a random-weight qwen35 GGUF with the real Qwen3.5 shapes (or a
// qwen3 one with a Qwen3-Embedding / Qwen3-Reranker shape), or the Qwen3.5 vision tower (an
// mmproj GGUF) for one of them, for benchmarks and loading tests without downloading checkpoints.
//
//   deltaserve-synth --shape 0.8b|2b|4b|9b|27b|tiny|qwen3-{embed,rerank}-{0.6b,4b,8b} --out F.gguf [--seed S] [--vocab
//   N]
//                    [--no-mtp] [--layers N] [--threads T] [--tokenizer-from G.gguf] [--echo E]
//   deltaserve-synth --shape mmproj-9b|mmproj-27b|...|mmproj-tiny --out M.gguf [--seed S] [--layers N] [--threads T]
//
// The tokenizer is copied from G.gguf (every tokenizer.* key, the token table padded with
// "[PAD<id>]" UNUSED tokens to the shape's vocabulary), or without the flag a built-in
// minimal byte-level one (tools/synth/tokenizer_keys.h, with the vision markers): the file always loads as a whole
// model in deltaserve and llama.cpp. The file streams to disk (bounded memory), is the same for the same arguments
// whatever the thread count, and loads with load_model_config. Sizes: 9b ~9.5 GB, 27b ~29 GB.
// mmproj-<text shape>: the real Qwen3.5 tower (depth 27, hidden 1152, F16, ~0.9 GB) projecting to that text
// shape's hidden size (tools/synth/mmproj.h); --layers sets its depth. Serve the pair with
// `deltaserve serve --model F.gguf --mmproj M.gguf`.
// --echo E (qwen35, 0..0.99): every block leans to predicting its input token again (SynthShape::echo),
// so random-weight MTP drafts get accepted in speculation tests.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "tools/cli_args.h"
#include "tools/synth/generate.h"
#include "tools/synth/mmproj.h"
#include "tools/synth/shapes.h"

namespace {

struct Options {
  std::string shape;
  std::string out;
  uint64_t seed = 1;
  uint32_t vocab = 0;   // 0: the shape's
  uint32_t layers = 0;  // 0: the shape's
  bool no_mtp = false;
  float echo = 0;              // SynthShape::echo
  int threads = 0;             // 0: all hardware threads
  std::string tokenizer_from;  // empty: the built-in minimal tokenizer
};

using ds::cli::parse_number;

const ds::cli::Usage kUsage{"deltaserve-synth",
                            "--shape 0.8b|2b|4b|9b|27b|tiny|qwen3-embed-4b|qwen3-rerank-0.6b|mmproj-9b|mmproj-tiny|... "
                            "--out F.gguf [--seed S] [--vocab N] [--no-mtp] "
                            "[--layers N] [--threads T] [--tokenizer-from G.gguf] [--echo E]"};

// --echo: a number in [0, 0.99].
float parse_echo(const std::string& v) {
  char* end = nullptr;
  const float e = std::strtof(v.c_str(), &end);
  if (v.empty() || end != v.c_str() + v.size() || !(e >= 0 && e <= 0.99f)) {
    kUsage.fail("--echo needs a number in [0, 0.99], got '" + v + "'");
  }
  return e;
}

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
    else if (a == "--echo")
      o.echo = parse_echo(args.value());
    else if (a == "--tokenizer-from")
      o.tokenizer_from = args.value();
    else
      args.unknown();
  }
  if (o.shape.empty()) kUsage.fail("--shape is required");
  if (o.out.empty()) kUsage.fail("--out is required");
  return o;
}

// An mmproj shape: the tower alone (the text model's flags do not apply).
void write_mmproj(const Options& o) {
  if (o.vocab || o.no_mtp || o.echo > 0 || !o.tokenizer_from.empty()) {
    kUsage.fail("--vocab, --no-mtp, --echo and --tokenizer-from are text-model flags; " + o.shape +
                " is a vision tower");
  }
  ds::synth::MmprojShape shape = ds::synth::mmproj_shape_by_name(o.shape);
  if (o.layers) shape.depth = o.layers;
  const ds::synth::SynthSummary s = ds::synth::write_synth_mmproj(shape, o.out, o.seed, o.threads);
  std::printf(
      "%s: qwen35 vision tower %s, depth %u, hidden %u, %u heads, MLP %u, patch %u, merge %u, %ux%u positions, "
      "-> %u, %zu tensors, %.1f M params, %.2f GB, %.1f s\n",
      o.out.c_str(), shape.name.c_str(), shape.depth, shape.hidden, shape.heads, shape.ffn, shape.patch, shape.merge,
      shape.pos_side, shape.pos_side, shape.out_hidden, s.n_tensors, static_cast<double>(s.n_params) * 1e-6,
      static_cast<double>(s.file_bytes) * 1e-9, s.seconds);
}

void write_model(const Options& o) {
  ds::synth::SynthShape shape = ds::synth::shape_by_name(o.shape);
  if (o.vocab) shape.n_vocab = o.vocab;
  if (o.layers) shape.n_layer = o.layers;
  if (o.no_mtp) shape.n_nextn = 0;
  if (o.echo > 0 && shape.arch == "qwen3") kUsage.fail("--echo is for the qwen35 shapes");
  shape.echo = o.echo;
  const ds::synth::SynthSummary s = ds::synth::write_synth_gguf(shape, o.out, o.seed, o.threads, o.tokenizer_from);
  std::printf("%s: %s %s, %u layers + %u MTP, vocab %u, %zu tensors, %.3f B params, %.2f GB, %.1f s\n", o.out.c_str(),
              shape.arch.c_str(), shape.name.c_str(), shape.n_layer, shape.n_nextn, shape.n_vocab, s.n_tensors,
              static_cast<double>(s.n_params) * 1e-9, static_cast<double>(s.file_bytes) * 1e-9, s.seconds);
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  try {
    if (ds::synth::is_mmproj_shape(o.shape)) {
      write_mmproj(o);
    } else {
      write_model(o);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "deltaserve-synth: %s\n", e.what());
    return 1;
  }
  return 0;
}
