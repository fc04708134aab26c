// deltaserve: the coordinator process.
//
//   deltaserve serve --model F.gguf [--workers N] [--backend cpu|cuda] [--port P] ...
//
// Reads the model's metadata (tokenizer, chat template, config) from the GGUF, starts (or
// waits for) the workers, runs the continuous-batching engine (ModelHost; one more per
// --embed-model / --rerank-model, each with its own workers), and serves the OpenAI API
// until SIGTERM/SIGINT; then it stops accepting, finishes or cancels in-flight requests,
// shuts the workers down and exits 0.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "common/log.h"
#include "common/systemd_notify.h"
#include "coordinator/app/model_host.h"
#include "coordinator/app/serve_options.h"
#include "coordinator/engine/gpu_share.h"
#include "coordinator/engine/mps_daemon.h"
#include "coordinator/openai/openai_server.h"

namespace {

constexpr const char* kUsage = "usage: deltaserve serve --model F.gguf [options]   (deltaserve serve --help)\n";

// The log format is fixed once, from the options; workers this process starts get the same.
void configure_logging(ds::ServeOptions& o) {
  ds::log::Config lc;
  ds::log::parse_format(o.log_format, &lc.format);  // validated by the parser
  lc.proc = "coordinator";
  ds::log::configure(lc);
  o.engine.worker_extra_args.push_back("--log-format=" + o.log_format);
}

// The embedding / reranker models this coordinator hosts beside a chat model.
std::vector<std::unique_ptr<ds::ModelHost>> side_models(const ds::ServeOptions& o) {
  std::vector<std::unique_ptr<ds::ModelHost>> out;
  for (const auto& [side, mode] : {std::pair{&o.embed_model, "embed"}, std::pair{&o.rerank_model, "rerank"}}) {
    if (side->model_path.empty()) continue;
    out.push_back(std::make_unique<ds::ModelHost>(ds::side_model_options(o, *side, mode)));
    const std::string& kind = out.back()->options().http.model_kind;
    if (kind != mode) {
      throw std::runtime_error(std::string("--") + mode + "-model " + side->model_path + " is a " + kind +
                               " model (its GGUF's pooling type), not a " + mode + " model");
    }
  }
  return out;
}

ds::PeerSet upstreams(const ds::ServeOptions& o) {
  ds::PeerSet peers;
  for (const auto& [url, kind] : {std::pair{&o.embed_upstream, "embed"}, std::pair{&o.rerank_upstream, "rerank"}}) {
    if (url->empty()) continue;
    ds::UpstreamRoute u;
    u.kind = kind;
    u.options.url = *url;
    u.options.role = std::string(kind) == "embed" ? "embedding upstream" : "reranker upstream";
    u.options.api_key = o.upstream_api_key;
    u.options.response_timeout = std::chrono::seconds(o.upstream_timeout_s);
    peers.upstreams.push_back(std::move(u));
  }
  return peers;
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
  ds::ModelHost main_model(o);
  const ds::ServeOptions& mo = main_model.options();
  ds::PeerSet peers = upstreams(o);
  std::vector<std::unique_ptr<ds::ModelHost>> sides = side_models(o);
  if (mo.http.model_kind != "chat" && (!sides.empty() || !peers.upstreams.empty())) {
    throw std::runtime_error("--embed-model, --rerank-model and the upstreams go with a chat model; " +
                             mo.engine.model_path + " is a " + mo.http.model_kind + " model");
  }
  ds::log::info("deltaserve", ds::describe(o));
  // With --mps auto|on the engine starts its own MPS daemon (and warns itself if it cannot).
  const std::string gpu_hint = mo.engine.mps == "off"
                                   ? ds::shared_gpu_hint(mo.engine.backend, mo.engine.devices, mo.engine.n_workers,
                                                         ds::mps_serves_this_process())
                                   : std::string();
  if (!gpu_hint.empty()) ds::log::warn("deltaserve", gpu_hint);

  main_model.start();
  for (const auto& side : sides) {
    side->start();
    peers.hosted.push_back(side->served());
  }
  const ds::ServedModel m = main_model.served();
  const int rc = ds::run_http_server(
      *m.options, *m.engine, *m.tokenizer, *m.chat_template, nullptr,
      [&](uint16_t port) {
        const std::string& name = mo.http.served_model_name;
        ds::log::info("deltaserve",
                      "listening on http://" + mo.http.host + ":" + std::to_string(port) + " (model " + name + ")");
        // systemd (Type=notify): the coordinator is up once the workers are Ready and HTTP listens.
        ds::notify_ready("serving " + name + " on " + mo.http.host + ":" + std::to_string(port) + ", " +
                         std::to_string(mo.engine.n_workers) + " workers");
      },
      peers);
  ds::notify_stopping();
  ds::log::info("deltaserve", "shutting down");
  for (const auto& side : sides) side->stop();
  main_model.stop();
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
