// deltaserve: the coordinator process. `deltaserve serve` starts the workers and the pipeline
// engine, then waits (the HTTP front door is not wired yet) until SIGTERM/SIGINT, when it
// shuts the workers down and exits 0.
#include <csignal>
#include <cstring>
#include <iostream>

#include "coordinator/engine/engine.h"
#include "coordinator/engine/serve_options.h"

namespace {

volatile std::sig_atomic_t g_stop = 0;
void on_signal(int) { g_stop = 1; }

constexpr const char* kUsage = "usage: deltaserve serve --model F.gguf [--workers N] ... (deltaserve serve --help)\n";

int serve(int argc, char** argv) {
  ds::ServeOptions options;
  std::string error;
  bool help = false;
  if (!ds::parse_serve_options(argc, argv, &options, &error, &help)) {
    (help ? std::cout : std::cerr) << error << "\n";
    return help ? 0 : 2;
  }
  std::signal(SIGTERM, on_signal);
  std::signal(SIGINT, on_signal);
  std::cerr << "[deltaserve] " << ds::describe(options) << "\n";
  ds::PipelineEngine engine(options.engine);
  engine.start();
  for (const ds::WorkerInfo& w : engine.workers()) {
    std::cerr << "[deltaserve] rank " << w.rank << " layers [" << w.layers.first_layer << ", " << w.layers.last_layer
              << ") pid " << w.pid << " " << w.state << "\n";
  }
  std::cerr << "[deltaserve] engine ready; the HTTP server is not wired yet — waiting for SIGTERM\n";
  while (!g_stop) {
    engine.pump(100);
    // With no sequences in flight, a lost worker only needs its slice back (recover() waits).
    if (engine.needs_recovery()) engine.recover();
  }
  std::cerr << "[deltaserve] shutting down\n";
  engine.shutdown();
  return 0;
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
    std::cerr << "[deltaserve] fatal: " << e.what() << "\n";
    return 1;
  }
}
