// The worker's event loop: Hello -> Assign -> load slice -> Ready -> serve steps. It polls
// the control socket (coordinator) and, on stages after the first, the data socket (previous
// stage); it executes what it is told and decides nothing. Any malformed, wrong-version or
// inconsistent input is logged and dropped; the loop keeps serving.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "common/ipc/channel.h"
#include "worker/daemon/heartbeat.h"
#include "worker/daemon/service_notifier.h"
#include "worker/daemon/stage_runner.h"
#include "worker/daemon/worker_options.h"

namespace ds {

// Loads the stage an Assign names. Fills `shape` (n_embd, n_vocab) and `weight_bytes`; throws
// std::exception with the reason when it cannot.
using StageLoader = std::function<std::unique_ptr<StageModel>(const ipc::v1::Assign& assign,
                                                              const WorkerOptions& options, int n_threads,
                                                              StageShape* shape, uint64_t* weight_bytes)>;

// The production loader: mmaps the GGUF and loads the slice on the worker's backend (CPU, or
// CUDA when built with it), checking a CUDA slice against the GPU memory budget first.
std::unique_ptr<StageModel> load_gguf_stage(const ipc::v1::Assign& assign, const WorkerOptions& options,
                                            int n_threads, StageShape* shape, uint64_t* weight_bytes);

// Whether this build and machine can run `backend` ("cpu" always; "cuda" with a GPU).
bool backend_available(const std::string& backend);

class WorkerDaemon {
 public:
  WorkerDaemon(WorkerOptions options, StageLoader loader);
  ~WorkerDaemon();
  // Serves until Shutdown arrives or `stop` becomes true. Returns the process exit code.
  int run(const std::atomic<bool>& stop);

 private:
  void send_hello();
  void send_to_coordinator(const ipc::v1::Envelope& env, const std::vector<uint8_t>& bulk = {});
  void on_control(const ipc::Received& msg);
  void on_data(const ipc::Received& msg);
  void handle_assign(const ipc::v1::Assign& assign);
  void handle_drop(const ipc::v1::DropSequences& drop);
  void handle_step(const ipc::v1::StepPlan& plan, const std::vector<uint8_t>& hidden,
                   const google::protobuf::RepeatedPtrField<ipc::v1::StageTiming>& timings);
  void report_step_error(const ipc::v1::StepPlan& plan, const std::string& why);
  bool drain(ipc::ZmqChannel& channel, bool is_data);

  WorkerOptions options_;
  StageLoader loader_;
  uint64_t instance_id_ = 0;
  uint64_t epoch_ = 0;
  bool shutdown_ = false;
  ipc::Context ctx_;
  std::unique_ptr<ipc::ZmqChannel> control_;
  std::unique_ptr<ipc::ZmqChannel> data_in_;   // stages after the first
  std::unique_ptr<ipc::ZmqChannel> data_out_;  // stages before the last
  std::unique_ptr<StageRunner> runner_;
  std::optional<ipc::v1::Assign> assign_;
  WorkerStats stats_;
  std::unique_ptr<HeartbeatThread> heartbeat_;
  ServiceNotifier notifier_;  // systemd: status, READY, watchdog, STOPPING
};

}  // namespace ds
