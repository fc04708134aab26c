// deltaserve-worker: the per-device daemon. Connects to the coordinator, loads the layer
// slice it is assigned and executes steps until told to shut down (or SIGTERM/SIGINT).
#include <csignal>
#include <iostream>

#include "common/log.h"
#include "worker/daemon/worker_daemon.h"

namespace {
std::atomic<bool> g_stop{false};
void on_signal(int) {
  g_stop = true;
}
}  // namespace

int main(int argc, char** argv) {
  ds::WorkerOptions options;
  std::string error;
  bool help = false;
  if (!ds::parse_worker_options(argc, argv, &options, &error, &help)) {
    (help ? std::cout : std::cerr) << error << "\n";
    return help ? 0 : 2;
  }
  ds::log::Config log_config;
  ds::log::parse_format(options.log_format, &log_config.format);  // validated by the parser
  log_config.proc = "worker";
  log_config.rank = static_cast<int>(options.rank);
  ds::log::configure(log_config);
  std::signal(SIGTERM, on_signal);
  std::signal(SIGINT, on_signal);
  try {
    ds::WorkerDaemon daemon(options, ds::load_gguf_stage);
    return daemon.run(g_stop);
  } catch (const std::exception& e) {
    ds::log::error("worker", ds::log::Msg() << "fatal: " << e.what());
    return 1;
  }
}
