// deltaserve: the coordinator process.
//
//   deltaserve serve --model F.gguf [--workers N] [--backend cpu|cuda] [--port P] ...
//
// Reads the model's metadata (tokenizer, chat template, config) from the GGUF, starts (or
// waits for) the workers, runs the continuous-batching engine, and serves the OpenAI API
// until SIGTERM/SIGINT; then it stops accepting, finishes or cancels in-flight requests,
// shuts the workers down and exits 0.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <thread>

#include "common/gguf.h"
#include "common/log.h"
#include "common/model_config.h"
#include "common/systemd_notify.h"
#include "coordinator/app/serve_options.h"
#include "coordinator/chat_template/chat_template.h"
#include "coordinator/engine/engine.h"
#include "coordinator/engine/gpu_share.h"
#include "coordinator/engine/mps_daemon.h"
#include "coordinator/openai/openai_server.h"
#include "coordinator/serving/batch_engine.h"
#include "coordinator/tokenizer/tokenizer.h"

namespace {

constexpr const char* kUsage = "usage: deltaserve serve --model F.gguf [options]   (deltaserve serve --help)\n";
constexpr uint32_t kDefaultMaxContext = 32768;

std::string file_name(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// Context per sequence: the flag, else the model's, capped so the default KV budget stays sane.
uint32_t resolve_max_context(const ds::ServeOptions& o, const ds::ModelConfig& cfg) {
  if (o.engine.max_context) return o.engine.max_context;
  const uint32_t model = cfg.context_length ? cfg.context_length : kDefaultMaxContext;
  return model < kDefaultMaxContext ? model : kDefaultMaxContext;
}

ds::SchedulerConfig scheduler_config(const ds::ServeOptions& o, uint32_t max_context, const ds::Tokenizer& tok) {
  ds::SchedulerConfig s;
  s.block_size = o.block_size;
  s.max_batch_tokens = o.max_batch_tokens;
  s.max_seqs = o.max_seqs;
  s.max_context = max_context;
  const uint32_t blocks_per_seq = (max_context + o.block_size - 1) / o.block_size;
  s.num_blocks = o.kv_blocks ? o.kv_blocks : blocks_per_seq * o.max_seqs;
  s.eos_token_ids = tok.eog_ids();
  s.num_snapshots = o.prefix_cache_snapshots.value_or(2 * o.max_seqs);  // 0: prefix cache off
  s.spec_k = o.spec_k;
  s.decode_groups = o.decode_groups ? o.decode_groups
                                    : ds::auto_decode_groups(o.engine.backend, o.engine.devices, o.engine.n_workers,
                                                             static_cast<uint32_t>(o.engine.threads_per_worker),
                                                             std::thread::hardware_concurrency());
  return s;
}

// The scheduler plans with the pools every worker holds (the minimum they reported at Ready).
void plan_with_worker_capacity(const ds::CacheGeometry& workers, ds::SchedulerConfig* s) {
  if (workers.max_seqs < s->max_seqs) {
    ds::log::warn("deltaserve", ds::log::Msg() << "the workers' memory budgets hold " << workers.max_seqs << " of the "
                                               << s->max_seqs << " sequences --max-seqs asks for (each with one "
                                               << s->max_context << "-token context)");
  }
  s->num_blocks = workers.num_blocks;
  s->max_seqs = workers.max_seqs;
  s->num_snapshots = workers.num_snapshots;
  ds::log::info("deltaserve", ds::log::Msg()
                                  << "KV capacity: " << s->num_blocks << " blocks of " << s->block_size << " tokens ("
                                  << uint64_t{s->num_blocks} * s->block_size << " tokens in total), " << s->max_seqs
                                  << " state slots, " << s->num_snapshots << " state snapshots"
                                  << (s->num_snapshots ? "" : " (prefix cache off)"));
}

// The log format is fixed once, from the options; workers this process starts get the same.
void configure_logging(ds::ServeOptions& o) {
  ds::log::Config lc;
  ds::log::parse_format(o.log_format, &lc.format);  // validated by the parser
  lc.proc = "coordinator";
  ds::log::configure(lc);
  o.engine.worker_extra_args.push_back("--log-format=" + o.log_format);
}

int serve(int argc, char** argv) {
  ds::ServeOptions o;
  std::string error;
  bool help = false;
  if (!ds::parse_serve_options(argc, argv, ds::deltaserve_environment(), &o, &error, &help)) {
    (help ? std::cout : std::cerr) << error << "\n";
    return help ? 0 : 2;
  }
  configure_logging(o);
  const ds::GgufFile gguf = ds::GgufFile::open(o.engine.model_path);
  const ds::ModelConfig cfg = ds::load_model_config(gguf);
  const ds::Tokenizer tokenizer(gguf);
  const ds::ChatTemplate chat_template = ds::ChatTemplate::from_gguf(gguf);
  o.engine.max_context = resolve_max_context(o, cfg);
  if (o.http.served_model_name.empty()) o.http.served_model_name = file_name(o.engine.model_path);
  o.http.model_file_name = file_name(o.engine.model_path);
  ds::log::info("deltaserve", ds::describe(o));
  // With --mps auto|on the engine starts its own MPS daemon (and warns itself if it cannot).
  const std::string gpu_hint =
      o.engine.mps == "off"
          ? ds::shared_gpu_hint(o.engine.backend, o.engine.devices, o.engine.n_workers, ds::mps_serves_this_process())
          : std::string();
  if (!gpu_hint.empty()) ds::log::warn("deltaserve", gpu_hint);

  // The scheduler's numbers are upper bounds for the workers' pools (sent in Assign): each
  // worker allocates what fits its memory budget and reports it at Ready; the scheduler then
  // plans with the minimum over the workers. An explicit --kv-blocks must fit every worker.
  ds::BatchEngineOptions bo;
  bo.scheduler = scheduler_config(o, o.engine.max_context, tokenizer);
  bo.max_plans_in_flight = o.pipeline_depth ? o.pipeline_depth : std::min<uint32_t>(o.engine.n_workers + 1, 4);
  ds::log::info("deltaserve", ds::log::Msg() << "decode groups: " << bo.scheduler.decode_groups
                                             << (o.decode_groups ? "" : " (auto)") << ", plans in flight up to "
                                             << std::max(bo.max_plans_in_flight, bo.scheduler.decode_groups));
  o.engine.cache = ds::worker_cache_geometry(bo.scheduler);
  o.engine.cache_sizing = ds::CacheSizing::kFitBudget;
  o.engine.spec_k = bo.scheduler.spec_k;  // the workers budget each slot's rollback records
  o.engine.draft_vocab = o.draft_vocab;
  o.engine.require_num_blocks = o.kv_blocks != 0;
  ds::log::info("deltaserve", ds::log::Msg() << "worker memory: up to " << o.engine.cache.num_blocks << " KV blocks of "
                                             << o.engine.cache.block_size << " tokens, " << o.engine.cache.max_seqs
                                             << " state slots, " << o.engine.cache.num_snapshots
                                             << " state snapshots, as far as each worker's memory budget allows");

  ds::PipelineEngine pipeline(o.engine);
  pipeline.start();
  plan_with_worker_capacity(pipeline.cache_geometry(), &bo.scheduler);
  for (const ds::WorkerInfo& w : pipeline.workers()) {
    ds::log::info("deltaserve", ds::log::Msg() << "rank " << w.rank << " layers [" << w.layers.first_layer << ", "
                                               << w.layers.last_layer << ") pid " << w.pid << " " << w.state);
  }
  ds::BatchEngine engine(pipeline, bo);
  engine.start();
  const int rc = ds::run_http_server(o.http, engine, tokenizer, chat_template, nullptr, [&](uint16_t port) {
    ds::log::info("deltaserve", "listening on http://" + o.http.host + ":" + std::to_string(port) + " (model " +
                                    o.http.served_model_name + ")");
    // systemd (Type=notify): the coordinator is up once the workers are Ready and HTTP listens.
    ds::notify_ready("serving " + o.http.served_model_name + " on " + o.http.host + ":" + std::to_string(port) + ", " +
                     std::to_string(o.engine.n_workers) + " workers");
  });
  ds::notify_stopping();
  ds::log::info("deltaserve", "shutting down");
  engine.stop();
  pipeline.shutdown();
  ds::log::info("deltaserve", "stopped (exit code " + std::to_string(rc) + ")");
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "serve") != 0) {
    std::cerr << kUsage;
    return 2;
  }
  try {
    return serve(argc - 2, argv + 2);
  } catch (const std::exception& e) {
    ds::log::error("deltaserve", std::string("fatal: ") + e.what());
    return 1;
  }
}
