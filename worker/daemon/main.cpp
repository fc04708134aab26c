// deltaserve-worker: the per-device daemon. Connects to the coordinator, loads the layer
// slice it is assigned and executes steps until told to shut down (or SIGTERM/SIGINT).
#include <csignal>
#include <iostream>

#include "worker/daemon/worker_daemon.h"

namespace {
std::atomic<bool> g_stop{false};
void on_signal(int) { g_stop = true; }
}  // namespace

int main(int argc, char** argv) {
  ds::WorkerOptions options;
  std::string error;
  bool help = false;
  if (!ds::parse_worker_options(argc, argv, &options, &error, &help)) {
    (help ? std::cout : std::cerr) << error << "\n";
    return help ? 0 : 2;
  }
  std::signal(SIGTERM, on_signal);
  std::signal(SIGINT, on_signal);
  try {
    ds::WorkerDaemon daemon(options, ds::load_gguf_stage);
    return daemon.run(g_stop);
  } catch (const std::exception& e) {
    std::cerr << "[worker " << options.rank << "] fatal: " << e.what() << "\n";
    return 1;
  }
}
