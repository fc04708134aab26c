// The worker's event loop: Hello -> Assign -> load slice -> Ready -> serve steps. It polls
// the control socket (coordinator) and, on stages after the first, the data socket (previous
// stage); it executes what it is told and decides nothing. Any malformed, wrong-version or
// inconsistent input is logged and dropped; the loop keeps serving.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "common/ipc/channel.h"
#include "common/ipc/hidden_transport.h"
#include "worker/cache/pool_sizing.h"
#include "worker/daemon/heartbeat.h"
#include "worker/daemon/landing_watch.h"
#include "worker/daemon/service_notifier.h"
#include "worker/daemon/stage_runner.h"
#include "worker/daemon/worker_options.h"

namespace ds {

// What loading an Assign's slice produced.
struct LoadedStage {
  std::unique_ptr<StageModel> model;
  StageShape shape;                // n_embd, n_vocab (rank is filled by the daemon)
  uint64_t weight_bytes = 0;       // weights of the slice
  PoolSizing pools;                // the pools allocated at load (num_blocks 0: self-managed, they grow)
  uint64_t pool_budget_bytes = 0;  // the memory budget the pools were sized against (0: not sized)
};

// Loads the stage an Assign names, sizing its pools (Assign.cache_sizing). Throws
// std::exception with the reason when it cannot (including pools that do not fit).
using StageLoader =
    std::function<LoadedStage(const ipc::v1::Assign& assign, const WorkerOptions& options, int n_threads)>;

// The production loader: mmaps the GGUF and loads the slice on the worker's backend (CPU, or
// CUDA when built with it). Pool budget: --memory-budget (cpu default min(4 GiB, RAM/4)); on
// cuda the --gpu-memory-fraction share of the GPU (at most what is free) less the weights and
// --gpu-workspace-reserve.
LoadedStage load_gguf_stage(const ipc::v1::Assign& assign, const WorkerOptions& options, int n_threads);
// The worker's options with the coordinator's numerics and memory settings from Assign applied
// over its own flags (prefill precision, decode GEMV, bf16 weight copy, pool budget; an empty or
// 0 field keeps the worker's). Throws std::runtime_error naming a field that holds no valid value.
WorkerOptions with_assigned_settings(const WorkerOptions& own, const ipc::v1::Assign& assign);

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
  std::unique_ptr<ipc::HiddenSender> make_hidden_sender(const std::string& next_endpoint);
  // `input_done` (stages after the first) hands the input's ring slot back; false means the
  // slot was overwritten while being read, so the output must not be sent on.
  // `input_from_shm` marks this stage's timing (StageTiming.input_from_shm).
  // `landing`: the chunk's bytes may still be landing (ShmSlot.lands_later).
  void handle_step(const ipc::v1::StepPlan& plan, std::span<const uint8_t> hidden,
                   const google::protobuf::RepeatedPtrField<ipc::v1::StageTiming>& timings,
                   const std::function<bool()>& input_done = {}, bool input_from_shm = false,
                   const std::optional<ipc::HiddenReceiver::Landing>& landing = std::nullopt);
  // Where stage 0's output goes: the next stage's ring slot, with its ready word under
  // --early-handoff on (the rows may then land after the descriptor is sent).
  HiddenDestination reserve_output(size_t nbytes, bool may_land_later);
  void report_step_error(const ipc::v1::StepPlan& plan, const std::string& why);
  // The grammar masks of a plan sent with masks_follow: already here, or received from the
  // coordinator now (other control messages meanwhile wait in deferred_control_, in order).
  ipc::v1::StepMasks await_masks(const ipc::v1::StepPlan& plan);
  void keep_masks(const ipc::v1::StepMasks& masks);
  // Handles the control messages put aside while waiting for masks; false when there were none.
  bool handle_deferred_control();
  bool drain(ipc::ZmqChannel& channel, bool is_data);

  WorkerOptions options_;
  StageLoader loader_;
  uint64_t instance_id_ = 0;
  uint64_t epoch_ = 0;
  int busy_poll_us_ = 0;                // busy_poll_window_us(options_)
  int64_t last_message_ms_ = -1000000;  // steady clock of the last message handled
  bool shutdown_ = false;
  ipc::Context ctx_;
  std::unique_ptr<ipc::ZmqChannel> control_;
  std::unique_ptr<ipc::ZmqChannel> data_in_;       // stages after the first
  std::unique_ptr<ipc::ZmqChannel> data_out_;      // stages before the last
  std::unique_ptr<ipc::HiddenSender> hidden_out_;  // over data_out_: shm ring (same host) or inline
  ipc::HiddenReceiver hidden_in_;                  // resolves data_in_'s chunks (ring slot or inline)
  std::unique_ptr<LandingWatch> landing_watch_;    // made by the first chunk that lands later
  std::unique_ptr<StageRunner> runner_;
  // Masks that came before their plan (a later stage gets its plans from the previous stage but
  // its masks from the coordinator), by plan id; dropped once a later plan runs.
  std::map<uint64_t, ipc::v1::StepMasks> early_masks_;
  std::deque<ipc::Received> deferred_control_;
  std::optional<ipc::v1::Assign> assign_;
  WorkerStats stats_;
  std::unique_ptr<HeartbeatThread> heartbeat_;
  ServiceNotifier notifier_;  // systemd: status, READY, watchdog, STOPPING
};

}  // namespace ds
