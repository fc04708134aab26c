// deltaserve-logits: runs the forward pass on a token list and prints one JSON object with
// the logit digest (top-16 ids + logits, log-sum-exp) of the last position, of every position
// (--all-positions) or of the MTP rows (--mtp). This is the stable interface every backend and
// deployment shape is checked against the reference with.
//
//   deltaserve-logits --model F.gguf --ids 1,2,3 | --prompt TEXT [--all-positions] [--mtp] [--chunk N]
//                     [--out FILE.f32] [--threads T] [--backend cpu|cuda] [--device N]
//                     [--workers N]   (N > 0: through N real worker processes over ZeroMQ)
//                     [--kv-cache-type T] [--kv-cache-type-k T] [--kv-cache-type-v T]
//                                     (the KV cache's element types, common/kv_options.h)
//                     [--mmproj M.gguf --image FILE [--image FILE ...]]
//
// --prompt TEXT is tokenized by the model's tokenizer with control tokens parsed (so
// "<|image_pad|>" is one token); --ids are the token ids themselves. Images (vision input, issue
// 31): the prompt holds one <|image_pad|> per --image, in order (as the chat template renders an
// image: <|vision_start|><|image_pad|><|vision_end|>); each file (PNG, JPEG, GIF, WebP) is
// decoded, resized and hashed as `deltaserve serve` does it with its default --image-min-tokens /
// --image-max-tokens (coordinator/openai/vision_input.h), and its pad expanded to the image's
// token count before the positions are counted: --all-positions and --chunk see the expanded ids.
#include <algorithm>
#include <cstdio>
#include <exception>
#include <fstream>
#include <iterator>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/base64.h"
#include "common/gguf.h"
#include "common/model_config.h"
#include "common/vision_config.h"
#include "coordinator/engine/engine.h"
#include "coordinator/http/server_options.h"
#include "coordinator/openai/vision_input.h"
#include "coordinator/tokenizer/tokenizer.h"
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
  std::string prompt;               // --prompt: text instead of --ids
  std::string mmproj;               // --mmproj: the vision tower (needed by --image)
  std::vector<std::string> images;  // --image, in prompt order
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
                            "--model F.gguf --ids 1,2,3|--prompt TEXT [--mmproj M.gguf --image FILE ...] "
                            "[--all-positions] [--mtp] [--chunk N] [--out FILE.f32] "
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
    else if (a == "--prompt")
      o.prompt = args.value();
    else if (a == "--mmproj")
      o.mmproj = args.value();
    else if (a == "--image")
      o.images.push_back(args.value());
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
  if (o.ids.empty() == o.prompt.empty()) kUsage.fail("give --ids or --prompt (one of them)");
  if (!o.images.empty() && o.mmproj.empty()) kUsage.fail("--image needs --mmproj (the vision tower)");
  if (!o.images.empty() && o.mtp) kUsage.fail("--mtp is not available with --image");
  if (o.workers > 0 && o.mtp) kUsage.fail("--mtp is not available with --workers yet");
  if (o.backend != "cpu" && o.backend != "cuda") kUsage.fail("--backend must be cpu or cuda, got '" + o.backend + "'");
#ifndef DELTASERVE_HAVE_CUDA
  if (o.backend == "cuda")
    kUsage.fail("--backend cuda: this build has no CUDA support (configure with -DDELTASERVE_CUDA=ON)");
#endif
  return o;
}

// The token ids the model runs on, with the images (vision input) their pads stand for.
struct Prompt {
  std::vector<int32_t> ids;             // image pads expanded
  std::vector<ds::PromptImage> images;  // in position order
};

// An image file as a data: URL, so that it goes through the server's own loading (the decoder
// goes by the bytes, not by the MIME type: coordinator/media/image_source.h).
std::string image_data_url(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (!f.good() && !f.eof()) throw std::runtime_error("cannot read --image " + path);
  if (bytes.empty()) throw std::runtime_error("--image " + path + " is empty or unreadable");
  return "data:image/png;base64," + ds::base64_encode(bytes);
}

// The ids of --ids or --prompt, each image pad expanded for its --image as the server expands it
// (openai::prepare_images: decode, smart_resize within serve's default bounds, hash;
// openai::expand_image_pads).
Prompt make_prompt(const Options& o, const ds::GgufFile& gguf, const ds::ModelConfig& cfg) {
  Prompt p;
  p.ids = o.prompt.empty() ? o.ids : ds::Tokenizer(gguf).encode(o.prompt, true);
  if (p.ids.empty()) throw std::runtime_error("--prompt encodes to no tokens");
  if (o.images.empty()) return p;
  const auto pads = static_cast<size_t>(std::count(p.ids.begin(), p.ids.end(), cfg.image_token_id));
  if (cfg.image_token_id < 0 || pads != o.images.size()) {
    throw std::runtime_error("the prompt holds " + std::to_string(pads) + " <|image_pad|> tokens (id " +
                             std::to_string(cfg.image_token_id) + ") for " + std::to_string(o.images.size()) +
                             " --image files: one pad per image, in order");
  }
  const ds::VisionConfig vc = ds::read_vision_config(ds::GgufFile::open(o.mmproj));
  ds::VisionOptions v;
  v.enabled = true;
  v.patch_size = vc.patch_size;
  v.merge = vc.merge;
  v.image_token_id = cfg.image_token_id;
  v.max_images_per_request = static_cast<uint32_t>(o.images.size());
  std::vector<std::string> urls;
  for (const std::string& path : o.images) urls.push_back(image_data_url(path));
  const std::vector<ds::openai::PreparedImage> prepared = ds::openai::prepare_images(urls, v);
  p.ids = ds::openai::expand_image_pads(p.ids, prepared, cfg.image_token_id, &p.images);
  return p;
}

// One step's share of the prompt.
struct PromptChunk {
  uint32_t start_pos = 0;
  std::vector<int32_t> tokens;
  std::vector<uint32_t> rows;                       // the requested positions inside the chunk, relative to start_pos
  std::vector<const ds::PromptImage*> images = {};  // those starting before the chunk ends (M-RoPE positions)
  std::vector<const ds::PromptImage*> pixels = {};  // those with token rows in the chunk (stage 0 embeds them)
};

// The prompt's images that the chunk [begin, end) needs.
void add_chunk_images(const Prompt& p, size_t begin, size_t end, PromptChunk* c) {
  for (const ds::PromptImage& im : p.images) {
    if (im.span.first_pos >= end) continue;
    c->images.push_back(&im);
    if (im.span.end_pos() > begin) c->pixels.push_back(&im);
  }
}

// The prompt cut into --chunk pieces (one piece without --chunk); `wanted` (ascending
// positions) is dealt out to the pieces holding each position.
std::vector<PromptChunk> prompt_chunks(const Prompt& p, size_t chunk_size, const std::vector<size_t>& wanted) {
  std::vector<PromptChunk> chunks;
  const std::vector<int32_t>& ids = p.ids;
  const size_t chunk = chunk_size ? chunk_size : ids.size();
  size_t w = 0;
  for (size_t begin = 0; begin < ids.size(); begin += chunk) {
    const size_t end = std::min(ids.size(), begin + chunk);
    PromptChunk c;
    c.start_pos = static_cast<uint32_t>(begin);
    c.tokens.assign(ids.begin() + static_cast<std::ptrdiff_t>(begin), ids.begin() + static_cast<std::ptrdiff_t>(end));
    for (; w < wanted.size() && wanted[w] < end; ++w) c.rows.push_back(static_cast<uint32_t>(wanted[w] - begin));
    add_chunk_images(p, begin, end, &c);
    chunks.push_back(std::move(c));
  }
  return chunks;
}

// Runs the prompt through a single in-process stage, chunk by chunk. Returns logits of the
// requested rows ([n_rows, V]) and, when `final_hidden` is given, their final-normed hidden.
std::vector<float> run_prompt(ds::StageModel& model, const Prompt& p, const Options& o,
                              const std::vector<size_t>& wanted, std::vector<float>* final_hidden) {
  std::vector<float> logits;
  for (PromptChunk& c : prompt_chunks(p, o.chunk, wanted)) {
    ds::StepInput in;
    ds::SeqStep s;
    s.seq_id = 1;
    s.start_pos = c.start_pos;
    s.token_ids = std::move(c.tokens);
    s.logit_rows = std::move(c.rows);
    for (const ds::PromptImage* im : c.images) s.images.push_back(im->span);
    for (const ds::PromptImage* im : c.pixels) in.images.push_back({im->span.hash, *im->pixels});
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
std::vector<float> run_prompt_workers(const Prompt& p, const Options& o, const std::vector<size_t>& wanted) {
  ds::EngineOptions eo;
  eo.model_path = o.model;
  eo.mmproj_path = o.mmproj;  // stage 0 opens it
  eo.n_workers = o.workers;
  eo.backend = o.backend;
  eo.threads_per_worker = o.threads;
  eo.cache.k_type = o.kv_cache.k_type();  // sent in Assign
  eo.cache.v_type = o.kv_cache.v_type();
  ds::PipelineEngine engine(eo);
  engine.start();
  std::vector<float> logits;
  for (PromptChunk& c : prompt_chunks(p, o.chunk, wanted)) {
    ds::SeqRequest r;
    r.seq_id = 1;
    r.start_pos = c.start_pos;
    r.tokens = std::move(c.tokens);
    r.logit_rows = std::move(c.rows);
    r.random_u.assign(r.logit_rows.size(), 0.0);
    r.return_full_logits = true;
    for (const ds::PromptImage* im : c.images) r.images.push_back(im->span);
    for (const ds::PromptImage* im : c.pixels) r.image_pixels.push_back({im->span.hash, im->pixels});
    const ds::StepOutcome out = engine.step({r});
    for (const ds::RowResult& row : out.rows) logits.insert(logits.end(), row.logits.begin(), row.logits.end());
  }
  engine.shutdown();
  return logits;
}

// The whole model as one stage on the chosen backend.
std::unique_ptr<ds::StageModel> load_model(std::shared_ptr<const ds::GgufFile> gguf, const ds::ModelConfig& cfg,
                                           ds::StageOptions so, const Options& o) {
  if (!o.mmproj.empty()) so.mmproj = std::make_shared<const ds::GgufFile>(ds::GgufFile::open(o.mmproj));
#ifdef DELTASERVE_HAVE_CUDA
  if (o.backend == "cuda") return ds::load_stage(gguf, cfg, {0, cfg.n_layer}, so, ds::make_cuda_backend(o.device));
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
    const Prompt prompt = make_prompt(o, *gguf, cfg);
    if (o.mtp && prompt.ids.size() < 2) throw std::runtime_error("--mtp needs at least 2 ids");
    std::vector<size_t> wanted;
    const size_t T = prompt.ids.size();
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
      logits = run_prompt_workers(prompt, o, wanted);
    } else {
      model = load_model(gguf, cfg, so, o);
      logits = run_prompt(*model, prompt, o, wanted, o.mtp ? &hidden : nullptr);
    }
    if (o.mtp) {
      // Row t = (final-normed hidden at t, token ids[t+1]) at position t: predicts ids[t+2].
      std::vector<int32_t> next(prompt.ids.begin() + 1, prompt.ids.end());
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
