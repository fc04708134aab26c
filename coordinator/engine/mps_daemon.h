// A private CUDA MPS control daemon for local CUDA workers that share a GPU.
//
// Without MPS, two worker processes on one GPU each hold their own GPU context and their kernels
// time-share the GPU; under MPS they share one context and overlap, which speeds up pipelined
// prefill; batch-1 decode gains little (a decode step is one chain of small kernels: nothing to
// overlap). Measured: docs/history/performance-2026-11.md, session 6. With EngineOptions::mps
// "on" (or "auto": only when no MPS daemon already serves this process) the engine starts
// `nvidia-cuda-mps-control -d` with its own pipe and log directories when local CUDA workers
// share a GPU, hands the directories to the workers through their environment, and quits the
// daemon when it shuts down. A private pipe directory means only our workers connect to it.
// "auto" by default (two workers on one GPU decode closer to a single worker's speed under MPS:
// docs/PERFORMANCE.md, Decisions measured, MPS). A daemon outlives a SIGKILLed
// server (`-d` detaches it); the next engine to start one quits such leftovers first
// (reap_stale_mps_daemons).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace ds {

// Whether the engine should start its own MPS daemon. `mode`: "auto" (when `backend` is cuda,
// the workers are local, two ranks share a GPU and `mps_running` is false), "on" (the same
// conditions except that a running daemon is not looked for: it asks for one of our own) or
// "off". `devices`: each rank's GPU as configured (empty: rank r on GPU r).
bool wants_private_mps(const std::string& mode, const std::string& backend, bool external_workers,
                       const std::vector<int>& devices, uint32_t n_ranks, bool mps_running);

// Whether an MPS control daemon already serves this process (its CUDA_MPS_PIPE_DIRECTORY, or the
// default /tmp/nvidia-mps, holds a control socket): gpu_share.h mps_control_running on this
// process's environment.
bool mps_serves_this_process();

// `name` resolved through PATH (names with a '/' are returned as they are); empty when not found.
std::string find_executable(const std::string& name);

// The private daemons' directories: <parent>/deltaserve-mps-<pid of the engine that started it>.
std::string private_mps_dir(const std::string& parent, int pid);

// Quits and removes the private daemons under `parent` whose engine is gone (a server killed
// before it could stop its daemon): each deltaserve-mps-<pid> directory whose pid no longer
// exists gets `quit` through `control_binary` (when its control socket is there) and is removed.
// Directories of live processes (this one included) are left alone. Returns how many it removed.
size_t reap_stale_mps_daemons(const std::string& parent, const std::string& control_binary);

class MpsDaemon {
 public:
  // Starts `control_binary -d` with CUDA_MPS_PIPE_DIRECTORY=dir/pipe and CUDA_MPS_LOG_DIRECTORY=
  // dir/log (created) and waits up to `wait_ms` for its control socket. nullptr, with the reason
  // in *why, when the binary is missing or fails or the socket does not appear.
  static std::unique_ptr<MpsDaemon> start(const std::string& control_binary, const std::string& dir, int wait_ms,
                                          std::string* why);
  ~MpsDaemon();  // stop()
  MpsDaemon(const MpsDaemon&) = delete;
  MpsDaemon& operator=(const MpsDaemon&) = delete;

  // "NAME=value" entries the workers need to reach the daemon.
  std::vector<std::string> worker_env() const;
  // Sends `quit` to the daemon (it stops its MPS servers) and removes the directories. Idempotent.
  void stop();

 private:
  MpsDaemon(std::string control_binary, std::string dir);
  std::string control_binary_, dir_;
  bool running_ = true;
};

}  // namespace ds
