// Every runtime switch of the worker daemon, parsed from the command line in one place.
#pragma once

#include <cstdint>
#include <string>

namespace ds {

struct WorkerOptions {
  std::string coordinator;        // control endpoint of the coordinator (ipc://... or tcp://...)
  uint32_t rank = 0;              // pipeline position this worker serves
  std::string backend = "cpu";    // "cpu" or "cuda"
  int device = -1;                // GPU index (cuda); -1 on cpu
  int threads = 1;                // compute threads (Assign.n_threads overrides when non-zero)
  int heartbeat_ms = 200;         // heartbeat period
  std::string hostname;           // advertised host for tcp data endpoints (default: gethostname)
  double gpu_memory_fraction = 0.9;  // cuda: share of the GPU's memory weights + caches may use
  std::string log_format = "text";   // text | json (see common/log.h)
};

// Parses argv. Returns false and fills `error` (usage included) on bad flags; `help` is set
// when --help was asked for.
bool parse_worker_options(int argc, char** argv, WorkerOptions* out, std::string* error, bool* help);

// One line for the startup log.
std::string describe(const WorkerOptions& options);

}  // namespace ds
