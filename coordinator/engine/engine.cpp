// Pipeline engine (see engine.h): lifecycle, control traffic, liveness and recovery. The step
// message layout lives in step_codec.cpp; process management in supervisor.cpp.
#include "coordinator/engine/engine.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <deque>
#include <filesystem>
#include <functional>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <stdexcept>

#include "common/byte_size.h"
#include "common/error.h"
#include "common/gguf.h"
#include "common/ipc/channel.h"
#include "common/ipc/endpoints.h"
#include "common/ipc/protocol.h"  // set_assign_kv_types
#include "common/ipc/shm_ring.h"
#include "common/log.h"
#include "common/model_config.h"
#include "coordinator/engine/capacity.h"
#include "coordinator/engine/gpu_share.h"
#include "coordinator/engine/layout.h"
#include "coordinator/engine/mps_daemon.h"
#include "coordinator/engine/registry.h"
#include "coordinator/engine/step_codec.h"
#include "coordinator/engine/supervisor.h"

namespace ds {
namespace v1 = ipc::v1;
namespace {

constexpr int kPollSliceMs = 20;  // bounds how late a death or a result is noticed

int64_t now_ms() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(steady_clock::now().time_since_epoch()).count();
}

// --spec-k drafts with the model's MTP block: a model without one is refused here, at start-up,
// naming the flag (its last stage could not draft, so every request would fail).
void check_spec_k(const ModelConfig& config, uint32_t spec_k, const std::string& model_path) {
  if (spec_k == 0 || config.n_nextn > 0) return;
  throw ConfigError("--spec-k " + std::to_string(spec_k) + ": " +
                    std::filesystem::path(model_path).filename().string() + " has no MTP block (" + config.arch +
                    ".nextn_predict_layers is 0), so nothing can draft; serve it with --spec-k 0");
}

}  // namespace

struct PipelineEngine::Impl {
  EngineOptions opt;
  ModelConfig config;
  std::vector<StageRange> layout;
  std::string endpoint;
  ipc::Context ctx;
  std::unique_ptr<ipc::ZmqChannel> router;
  std::unique_ptr<WorkerRegistry> registry;
  // Our own MPS daemon for workers sharing a GPU (EngineOptions::mps); declared before the
  // supervisor so that it is destroyed after the workers are gone.
  std::unique_ptr<MpsDaemon> mps;
  std::unique_ptr<LocalSupervisor> supervisor;
  bool busy_poll = false;                   // EngineOptions::busy_poll resolved at start_workers()
  std::vector<uint64_t> assigned_instance;  // instance each rank's Assign went to
  uint64_t epoch = 1;
  uint64_t next_plan_id = 1;
  uint64_t next_request_id = 1;
  bool needs_recovery = false;
  bool starting = false;
  bool stopped = false;
  std::string startup_error;
  SentSamplingMap sent_sampling;
  // The steps in flight, oldest first, and each one's result once it arrived (by plan id).
  struct Submitted {
    v1::StepPlan plan;
    std::chrono::steady_clock::time_point sent;
  };
  std::deque<Submitted> flying;
  std::map<uint64_t, std::optional<ipc::Received>> results;
  std::string pending_error;  // a StepError for a step in flight
  // The DropSequences in flight, if any.
  uint64_t pending_drop = 0;
  std::vector<bool> drop_acked;
  // Each rank's readiness and last contact as of the last pump, for serving_workers().
  struct Pulse {
    bool ready = false;
    int64_t last_seen_ms = 0;
  };
  mutable std::mutex pulse_mu;
  std::vector<Pulse> pulses;
  int64_t pulses_at_ms = -1000;
  void publish_pulses();

  explicit Impl(EngineOptions o) : opt(std::move(o)) {}

  void load_model_layout();
  void start_workers();
  std::vector<std::string> start_private_mps();
  std::vector<std::string> worker_gpu_fractions() const;
  void remove_shm_rings() const;
  void handle(const ipc::Received& msg);
  void on_hello(const ipc::Received& msg);
  void on_ready(const v1::Ready& ready, uint64_t instance);
  v1::Ready checked_ready(const v1::Ready& ready) const;
  bool sizes_from_budgets() const { return opt.cache_sizing == CacheSizing::kFitBudget && opt.cache.managed(); }
  uint32_t min_blocks() const;
  void adopt_worker_capacity();
  void on_lost(uint32_t rank, const std::string& why);
  void send_pending_assigns();
  v1::Assign make_assign(uint32_t rank) const;
  void send_to(uint32_t rank, const v1::Envelope& env);
  void pump_once(int timeout_ms);
  void check_liveness();
  // `step`: waiting for a step's result (busy-polled when EngineOptions::busy_poll says so);
  // start-up, recovery and drops always sleep between polls.
  bool wait_until(const std::function<bool()>& done, int timeout_ms, bool step = false);
  void wait_all_ready(int64_t deadline_ms);
  bool drop_everywhere(const std::vector<uint64_t>& ids, bool all, int64_t deadline_ms);
  void submit_plan(v1::StepPlan plan);
  StepOutcome collect_oldest();
  template <typename Error>
  [[noreturn]] void forget_in_flight(const Error& error);
};

// ---- lifecycle ----------------------------------------------------------------------------

void PipelineEngine::Impl::load_model_layout() {
  const GgufFile gguf = GgufFile::open(opt.model_path);
  config = load_model_config(gguf);
  check_spec_k(config, opt.spec_k, opt.model_path);
  layout = opt.layer_split.empty()
               ? plan_balanced_layout(layer_weight_bytes(gguf, config.n_layer), opt.n_workers,
                                      last_stage_extra_bytes(gguf, config.n_layer, opt.spec_k, opt.draft_vocab))
               : layout_from_counts(opt.layer_split, config.n_layer);
  if (layout.size() != opt.n_workers)
    throw ConfigError("layer split names " + std::to_string(layout.size()) + " stages for " +
                      std::to_string(opt.n_workers) + " workers");
  ds::log::info("engine", ds::log::Msg() << config.n_layer << " layers on " << opt.n_workers
                                         << " workers: " << describe_layout(layout));
}

// A private MPS daemon when local CUDA workers share a GPU (mps_daemon.h); returns the workers'
// extra environment. Also settles busy polling: "auto" is on with cuda workers, under MPS too
// (faster decode with two workers sharing a GPU under MPS too: docs/PERFORMANCE.md, Decisions
// measured, busy polling).
std::vector<std::string> PipelineEngine::Impl::start_private_mps() {
  const bool already = mps_serves_this_process();
  std::vector<std::string> env;
  if (wants_private_mps(opt.mps, opt.backend, opt.external_workers, opt.devices, opt.n_workers, already)) {
    std::string why;
    const std::string parent = std::filesystem::temp_directory_path().string();
    const std::string control = find_executable("nvidia-cuda-mps-control");
    reap_stale_mps_daemons(parent, control);
    mps = MpsDaemon::start(control, private_mps_dir(parent, getpid()), 5000, &why);
    if (mps == nullptr && opt.mps == "on") throw ConfigError("--mps on: could not start a CUDA MPS daemon: " + why);
    if (mps == nullptr) {
      ds::log::warn("engine", ds::log::Msg() << "workers share a GPU without CUDA MPS (" << why
                                             << "): their kernels time-share the GPU");
    } else {
      env = mps->worker_env();
    }
  }
  busy_poll = opt.busy_poll == "on" || (opt.busy_poll == "auto" && opt.backend == "cuda");
  return env;
}

void PipelineEngine::Impl::start_workers() {
  const std::vector<std::string> extra_env = start_private_mps();
  if (opt.external_workers) return;
  std::string binary = opt.worker_binary.empty() ? executable_dir() + "/deltaserve-worker" : opt.worker_binary;
  const std::vector<std::string> fractions = worker_gpu_fractions();
  auto args = [this, fractions](uint32_t rank) {
    std::vector<std::string> a{"--coordinator", endpoint,    "--rank",    std::to_string(rank),
                               "--backend",     opt.backend, "--threads", std::to_string(opt.threads_per_worker)};
    if (opt.backend == "cuda") {
      const int device = rank < opt.devices.size() ? opt.devices[rank] : static_cast<int>(rank);
      a.insert(a.end(), {"--device", std::to_string(device)});
      if (!fractions.empty()) a.insert(a.end(), {"--gpu-memory-fraction", fractions[rank]});
    }
    if (opt.hidden_transport != "auto") a.insert(a.end(), {"--hidden-transport", opt.hidden_transport});
    if (opt.early_handoff != "on") a.insert(a.end(), {"--early-handoff", opt.early_handoff});
    // cpu workers on "auto" keep their own default (no polling: they need the cores).
    if (opt.backend == "cuda" || opt.busy_poll != "auto")
      a.insert(a.end(), {"--busy-poll-us", busy_poll ? "5000" : "0"});
    a.insert(a.end(), opt.worker_extra_args.begin(), opt.worker_extra_args.end());
    return a;
  };
  supervisor = std::make_unique<LocalSupervisor>(binary, opt.n_workers, args, extra_env);
  supervisor->start_all();
}

// Each local CUDA worker's --gpu-memory-fraction (gpu_share.h), or none.
std::vector<std::string> PipelineEngine::Impl::worker_gpu_fractions() const {
  const std::vector<std::string> flags =
      gpu_fraction_flags(opt.backend, opt.gpu_memory_fraction, opt.devices, layout, config.n_nextn > 0);
  const std::vector<int> devices = device_of_each_rank(opt.devices, opt.n_workers);
  for (size_t r = 0; r < flags.size(); ++r) {
    ds::log::info("engine", ds::log::Msg()
                                << "rank " << r << " on GPU " << devices[r] << ": --gpu-memory-fraction " << flags[r]);
  }
  return flags;
}

// Workers unlink their hidden-state rings on a clean exit; this clears what a killed one left.
void PipelineEngine::Impl::remove_shm_rings() const {
  if (endpoint.rfind("ipc://", 0) != 0) return;
  for (uint32_t r = 1; r < opt.n_workers; ++r) {
    ipc::unlink_shm_ring(ipc::shm_ring_name(ipc::data_endpoints(endpoint, r, {}).connect));
  }
}

// ---- control traffic ----------------------------------------------------------------------

void PipelineEngine::Impl::send_to(uint32_t rank, const v1::Envelope& env) {
  const WorkerEntry& e = registry->at(rank);
  if (e.peer.empty() || !router->send(env, {}, e.peer)) on_lost(rank, "unreachable");
}

v1::Assign PipelineEngine::Impl::make_assign(uint32_t rank) const {
  v1::Assign a;
  a.set_rank(rank);
  a.set_model_path(std::filesystem::absolute(opt.model_path).string());
  a.set_first_layer(layout[rank].first_layer);
  a.set_last_layer(layout[rank].last_layer);
  a.set_is_first(rank == 0);
  a.set_is_last(rank + 1 == opt.n_workers);
  a.set_data_bind_endpoint(ipc::data_endpoints(endpoint, rank, registry->at(rank).hostname).bind);
  if (rank + 1 < opt.n_workers) {
    a.set_next_stage_endpoint(ipc::data_endpoints(endpoint, rank + 1, registry->at(rank + 1).hostname).connect);
  }
  a.set_memory_budget_bytes(opt.memory_budget_bytes);
  a.set_prefill_precision(opt.prefill_precision);
  a.set_output_head(output_head_wire_name(opt.output_head));
  a.set_decode_gemv(opt.decode_gemv);
  a.set_bf16_weight_copy(opt.bf16_weight_copy);
  a.set_pool_budget_bytes(opt.pool_budget_bytes);
  a.set_n_threads(static_cast<uint32_t>(opt.threads_per_worker));
  a.set_epoch(epoch);
  a.set_max_context(opt.max_context);
  a.set_block_size(opt.cache.block_size);
  a.set_num_blocks(opt.cache.num_blocks);
  a.set_max_seqs(opt.cache.max_seqs);
  a.set_num_snapshots(opt.cache.num_snapshots);
  ipc::set_assign_kv_types(&a, opt.cache.k_type, opt.cache.v_type);
  a.set_cache_sizing(opt.cache_sizing == CacheSizing::kFitBudget ? v1::CACHE_SIZING_FIT_BUDGET
                                                                 : v1::CACHE_SIZING_EXACT);
  a.set_spec_k(opt.spec_k);
  a.set_draft_vocab(opt.draft_vocab);
  if (!opt.mmproj_path.empty()) {
    a.set_mmproj_path(std::filesystem::absolute(opt.mmproj_path).string());
    a.set_image_max_tokens(opt.image_max_tokens);
  }
  return a;
}

// Assigns every rank whose current instance has not been assigned yet. The first round waits
// for all Hellos: a stage's Assign names the next stage's host.
void PipelineEngine::Impl::send_pending_assigns() {
  if (!registry->all_said_hello()) return;
  for (uint32_t r = 0; r < opt.n_workers; ++r) {
    const WorkerEntry& e = registry->at(r);
    if (e.instance_id == 0 || assigned_instance[r] == e.instance_id) continue;
    v1::Envelope env;
    *env.mutable_assign() = make_assign(r);
    assigned_instance[r] = e.instance_id;
    send_to(r, env);
  }
}

void PipelineEngine::Impl::on_hello(const ipc::Received& msg) {
  const v1::Hello& h = msg.env.hello();
  if (h.rank() >= opt.n_workers) {
    ds::log::warn("engine", ds::log::Msg()
                                << "ignored Hello from rank " << h.rank() << " (only " << opt.n_workers << " stages)");
    return;
  }
  if (registry->at(h.rank()).instance_id == h.instance_id()) return;  // repeated Hello
  if (registry->at(h.rank()).instance_id != 0) on_lost(h.rank(), "restarted");
  registry->on_hello(h, msg.peer, now_ms());
  ds::log::info("engine", ds::log::Msg() << "worker rank " << h.rank() << " pid " << h.pid() << " on " << h.hostname()
                                         << " said hello");
  send_pending_assigns();
}

// KV blocks of one max_context sequence: the least a worker sizing from its budget accepts.
uint32_t PipelineEngine::Impl::min_blocks() const {
  const uint64_t context = opt.max_context != 0 ? opt.max_context : config.context_length;
  const uint32_t bs = opt.cache.block_size != 0 ? opt.cache.block_size : 1;
  return static_cast<uint32_t>(std::min<uint64_t>((context + bs - 1) / bs, UINT32_MAX));
}

// A successful Ready whose pool capacity is not what its Assign allows (zero blocks, more than
// asked, a restart that did not get the negotiated sizes) counts as a failed load.
v1::Ready PipelineEngine::Impl::checked_ready(const v1::Ready& ready) const {
  if (!ready.ok() || !opt.cache.managed()) return ready;
  try {
    ready_capacity(ready, opt.cache, !sizes_from_budgets(), min_blocks());
    return ready;
  } catch (const std::exception& e) {
    v1::Ready failed = ready;
    failed.set_ok(false);
    failed.set_error(std::string("bad pool capacity: ") + e.what());
    return failed;
  }
}

// kFitBudget, once every worker is Ready: plan with what all of them hold, and size any later
// (restarted) worker exactly like that.
void PipelineEngine::Impl::adopt_worker_capacity() {
  std::vector<WorkerCapacity> caps;
  for (uint32_t r = 0; r < opt.n_workers; ++r) {
    WorkerCapacity w = ready_capacity(registry->at(r).ready, opt.cache, false, min_blocks());
    ds::log::info("engine", ds::log::Msg()
                                << "worker rank " << r << " holds " << w.pools.num_blocks << " KV blocks, "
                                << w.pools.max_seqs << " state slots, " << w.pools.num_snapshots << " snapshots ("
                                << format_bytes(w.bytes) << " of a " << format_bytes(w.budget_bytes) << " budget)");
    caps.push_back(w);
  }
  if (opt.require_num_blocks) require_kv_blocks(caps, opt.cache.num_blocks);
  opt.cache = common_capacity(caps);
  opt.cache_sizing = CacheSizing::kExact;
}

void PipelineEngine::Impl::on_ready(const v1::Ready& raw, uint64_t instance) {
  const v1::Ready ready = checked_ready(raw);
  if (!registry->on_ready(ready, instance, now_ms())) return;
  if (!ready.ok()) {
    ds::log::error("engine", ds::log::Msg() << "worker rank " << ready.rank() << " failed to load: " << ready.error());
    if (starting) startup_error = "worker rank " + std::to_string(ready.rank()) + " failed to load: " + ready.error();
  }
}

void PipelineEngine::Impl::on_lost(uint32_t rank, const std::string& why) {
  if (registry->at(rank).instance_id == 0) return;
  ds::log::warn("engine", ds::log::Msg() << "worker rank " << rank << " lost (" << why << ")");
  registry->mark_lost(rank);
  ++epoch;  // plans and chunks of the old epoch are discarded from now on
  needs_recovery = true;
  if (starting) startup_error = "worker rank " + std::to_string(rank) + " lost during startup (" + why + ")";
}

void PipelineEngine::Impl::handle(const ipc::Received& msg) {
  const v1::Envelope& env = msg.env;
  switch (env.body_case()) {
    case v1::Envelope::kHello:
      on_hello(msg);
      return;
    case v1::Envelope::kReady:
      on_ready(env.ready(), env.sender_instance());
      return;
    case v1::Envelope::kHeartbeat:
      registry->touch(env.heartbeat().rank(), env.heartbeat().instance_id(), now_ms());
      return;
    case v1::Envelope::kDropSequencesDone: {
      const auto& d = env.drop_sequences_done();
      if (d.request_id() == pending_drop && d.rank() < drop_acked.size()) drop_acked[d.rank()] = true;
      return;
    }
    case v1::Envelope::kStepResult: {
      if (const auto it = results.find(env.step_result().plan_id()); it != results.end()) it->second = msg;
      return;
    }
    case v1::Envelope::kStepError:
      if (results.count(env.step_error().plan_id()) != 0) {
        pending_error = "rank " + std::to_string(env.step_error().rank()) + ": " + env.step_error().message();
      }
      return;
    default:
      ds::log::warn("engine", ds::log::Msg() << "ignored unexpected message " << ipc::body_name(env));
  }
}

void PipelineEngine::Impl::check_liveness() {
  if (supervisor) {
    for (uint32_t rank : supervisor->poll()) on_lost(rank, "process exited");
  }
  for (uint32_t rank : registry->silent_ranks(now_ms(), opt.heartbeat_timeout_ms)) {
    on_lost(rank, "no heartbeat for " + std::to_string(opt.heartbeat_timeout_ms) + " ms");
    if (supervisor) supervisor->kill_rank(rank);  // a hung process is restarted like a crashed one
  }
}

void PipelineEngine::Impl::pump_once(int timeout_ms) {
  ipc::Received msg;
  std::string why;
  for (int wait = timeout_ms;; wait = 0) {
    const ipc::RecvStatus st = router->recv(&msg, wait, &why);
    if (st == ipc::RecvStatus::kTimeout) break;
    if (st == ipc::RecvStatus::kRejected) {
      ds::log::warn("engine", ds::log::Msg() << "dropped a frame: " << why);
      continue;
    }
    // Any message from a live instance proves it is alive.
    for (uint32_t r = 0; r < opt.n_workers; ++r) registry->touch(r, msg.env.sender_instance(), now_ms());
    handle(msg);
  }
  check_liveness();
  publish_pulses();
}

// At most every 10 ms: a busy-polling step wait pumps continuously.
void PipelineEngine::Impl::publish_pulses() {
  const int64_t t = now_ms();
  if (t - pulses_at_ms < 10) return;
  pulses_at_ms = t;
  std::vector<Pulse> now(opt.n_workers);
  for (uint32_t r = 0; registry && r < opt.n_workers; ++r) {
    const WorkerEntry& e = registry->at(r);
    now[r] = {e.state == WorkerState::kReady && e.instance_id != 0, e.last_seen_ms};
  }
  std::lock_guard<std::mutex> lock(pulse_mu);
  pulses.swap(now);
}

bool PipelineEngine::Impl::wait_until(const std::function<bool()>& done, int timeout_ms, bool step) {
  const int64_t deadline = now_ms() + timeout_ms;
  const bool spin = step && busy_poll;
  while (!done()) {
    if (now_ms() >= deadline) return false;
    pump_once(spin ? 0 : kPollSliceMs);
  }
  return true;
}

// ---- recovery -----------------------------------------------------------------------------

void PipelineEngine::Impl::wait_all_ready(int64_t deadline_ms) {
  const bool ok = wait_until(
      [this] {
        for (uint32_t r = 0; r < opt.n_workers; ++r) {
          if (registry->at(r).state == WorkerState::kFailed) return true;
        }
        return registry->all_ready() || !startup_error.empty();
      },
      static_cast<int>(std::max<int64_t>(0, deadline_ms - now_ms())));
  if (!startup_error.empty()) throw std::runtime_error(startup_error);
  for (uint32_t r = 0; r < opt.n_workers; ++r) {
    const WorkerEntry& e = registry->at(r);
    if (e.state == WorkerState::kFailed) {
      throw std::runtime_error("worker rank " + std::to_string(r) + " failed to load: " + e.ready.error());
    }
  }
  if (!ok) {
    std::string missing;
    for (uint32_t r = 0; r < opt.n_workers; ++r) {
      if (registry->at(r).state != WorkerState::kReady) {
        missing += " rank " + std::to_string(r) + " (" + worker_state_name(registry->at(r).state) + ")";
      }
    }
    throw std::runtime_error("workers not ready in time:" + missing);
  }
}

// Sends DropSequences to every stage and waits for all acknowledgements. Returns false when a
// stage was lost meanwhile (the caller recovers first).
bool PipelineEngine::Impl::drop_everywhere(const std::vector<uint64_t>& ids, bool all, int64_t deadline_ms) {
  const std::vector<uint32_t> generations = registry->generations();
  pending_drop = next_request_id++;
  drop_acked.assign(opt.n_workers, false);
  v1::Envelope env;
  v1::DropSequences* d = env.mutable_drop_sequences();
  d->mutable_seq_ids()->Add(ids.begin(), ids.end());
  d->set_all(all);
  d->set_epoch(epoch);
  d->set_request_id(pending_drop);
  for (uint32_t r = 0; r < opt.n_workers; ++r) send_to(r, env);
  auto done = [&] {
    if (registry->generations() != generations) return true;
    for (bool a : drop_acked) {
      if (!a) return false;
    }
    return true;
  };
  const bool in_time = wait_until(done, static_cast<int>(std::max<int64_t>(0, deadline_ms - now_ms())));
  pending_drop = 0;
  if (registry->generations() != generations) return false;
  if (!in_time) throw std::runtime_error("workers did not acknowledge DropSequences in time");
  return true;
}

// ---- steps --------------------------------------------------------------------------------

// Callers check needs_recovery first; a stage lost while sending is noticed by collect_oldest().
void PipelineEngine::Impl::submit_plan(v1::StepPlan plan) {
  if (flying.empty()) pending_error.clear();
  results[plan.plan_id()];
  v1::Envelope env;
  // The pixels move into the message (no copy of their bytes); the plan kept for reading the
  // result does not need them.
  google::protobuf::RepeatedPtrField<v1::ImagePixels> pixels;
  pixels.Swap(plan.mutable_image_pixels());
  *env.mutable_step_plan() = plan;
  env.mutable_step_plan()->mutable_image_pixels()->Swap(&pixels);
  flying.push_back(Submitted{std::move(plan), std::chrono::steady_clock::now()});
  send_to(0, env);  // an unreachable stage marks it lost: collect_oldest() throws WorkerLost
}

// After a failure every step in flight is forgotten: results still on their way are dropped
// on arrival, and the sampling rules of their sequences are sent again with their next plan.
template <typename Error>
void PipelineEngine::Impl::forget_in_flight(const Error& error) {
  for (const Submitted& f : flying) {
    for (const uint64_t id : f.plan.seq_ids()) sent_sampling.erase(id);
  }
  flying.clear();
  results.clear();
  pending_error.clear();
  throw error;
}

// Each stage handles its messages first come, first served, so results arrive in plan order
// and every stage computes exactly what one step at a time computes.
StepOutcome PipelineEngine::Impl::collect_oldest() {
  if (flying.empty()) throw std::logic_error("collect() with no step in flight");
  const uint64_t id = flying.front().plan.plan_id();
  const auto it = results.find(id);
  const bool done = wait_until([&] { return it->second || !pending_error.empty() || needs_recovery; },
                               opt.step_timeout_ms, /*step=*/true);
  if (needs_recovery) forget_in_flight(WorkerLost("a worker was lost during plan " + std::to_string(id)));
  if (!pending_error.empty()) forget_in_flight(StepFailed(pending_error));
  if (!done) {
    // A lost message looks like a lost worker: the state of the plan's sequences is unknown.
    ++epoch;
    needs_recovery = true;
    forget_in_flight(WorkerLost("no result for plan " + std::to_string(id) + " in time"));
  }
  StepOutcome out = decode_result(flying.front().plan, it->second->env.step_result(), it->second->bulk);
  out.wall_us = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - flying.front().sent)
          .count());
  results.erase(it);
  flying.pop_front();
  return out;
}

// ---- public API ---------------------------------------------------------------------------

PipelineEngine::PipelineEngine(EngineOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}

PipelineEngine::~PipelineEngine() {
  shutdown();
}

void PipelineEngine::start() {
  Impl& m = *impl_;
  if (m.opt.n_workers == 0) throw ConfigError("need at least one worker");
  m.load_model_layout();
  m.endpoint = m.opt.control_endpoint.empty() ? ipc::make_ipc_control_endpoint() : m.opt.control_endpoint;
  m.router = std::make_unique<ipc::ZmqChannel>(m.ctx, ipc::SocketRole::kRouter, m.endpoint);
  m.registry = std::make_unique<WorkerRegistry>(m.opt.n_workers);
  m.assigned_instance.assign(m.opt.n_workers, 0);
  ds::log::info("engine", ds::log::Msg() << "control endpoint " << m.endpoint);
  m.start_workers();
  m.starting = true;
  try {
    m.wait_all_ready(now_ms() + m.opt.startup_timeout_ms);
    if (m.sizes_from_budgets()) m.adopt_worker_capacity();
  } catch (...) {
    m.starting = false;
    throw;
  }
  m.starting = false;
  m.needs_recovery = false;  // nothing to recover before the first step
  // The last Ready may have landed within publish_pulses()' 10 ms throttle: publish now, so
  // serving_workers() (/ready, /metrics) counts every worker as soon as start() returns.
  m.pulses_at_ms = -1000;
  m.publish_pulses();
}

StepOutcome PipelineEngine::step(const std::vector<SeqRequest>& seqs, const std::vector<uint64_t>& released) {
  if (!impl_->flying.empty()) throw std::logic_error("step() while submitted steps are in flight");
  submit(seqs, released);
  return collect();
}

void PipelineEngine::submit(const std::vector<SeqRequest>& seqs, const std::vector<uint64_t>& released) {
  Impl& m = *impl_;
  if (m.needs_recovery) throw WorkerLost("a worker was lost; recover() and re-prefill first");
  m.submit_plan(encode_plan(seqs, released, m.opt.cache.managed(), m.next_plan_id++, m.epoch, &m.sent_sampling));
  const bool later = std::any_of(seqs.begin(), seqs.end(), [](const SeqRequest& s) { return s.masks_follow; });
  if (m.flying.back().plan.masks_follow() && !later) send_masks(seqs);
}

// The masks go to the last stage directly: it is the only one that needs them, and it waits for
// them only at its LM head, so the plan's layers run while they are computed and travel.
void PipelineEngine::send_masks(const std::vector<SeqRequest>& seqs) {
  Impl& m = *impl_;
  if (m.flying.empty() || !m.flying.back().plan.masks_follow()) {
    throw std::logic_error("send_masks() without a submitted plan whose masks follow");
  }
  v1::Envelope env;
  *env.mutable_step_masks() = encode_step_masks(seqs, m.flying.back().plan.plan_id(), m.epoch);
  m.send_to(m.opt.n_workers - 1, env);
}

void PipelineEngine::abandon_masks(const std::string& why) {
  Impl& m = *impl_;
  if (m.flying.empty() || !m.flying.back().plan.masks_follow()) return;
  v1::Envelope env;
  env.mutable_step_masks()->set_plan_id(m.flying.back().plan.plan_id());
  env.mutable_step_masks()->set_epoch(m.epoch);
  env.mutable_step_masks()->set_abandoned(why.empty() ? "the coordinator could not compute the masks" : why);
  m.send_to(m.opt.n_workers - 1, env);
}

StepOutcome PipelineEngine::collect() {
  return impl_->collect_oldest();
}

size_t PipelineEngine::in_flight() const {
  return impl_->flying.size();
}

void PipelineEngine::drop_sequences(const std::vector<uint64_t>& seq_ids) {
  Impl& m = *impl_;
  if (m.needs_recovery) return;  // recovery drops everything anyway
  for (uint64_t id : seq_ids) m.sent_sampling.erase(id);
  if (!m.drop_everywhere(seq_ids, false, now_ms() + m.opt.startup_timeout_ms)) m.needs_recovery = true;
}

void PipelineEngine::recover() {
  Impl& m = *impl_;
  const int64_t deadline = now_ms() + m.opt.startup_timeout_ms;
  for (;;) {
    m.wait_all_ready(deadline);
    if (m.drop_everywhere({}, true, deadline)) break;
  }
  m.sent_sampling.clear();
  m.flying.clear();  // steps in flight when the worker was lost, if nobody collected them
  m.results.clear();
  m.pending_error.clear();
  m.needs_recovery = false;
  ds::log::info("engine", ds::log::Msg() << "recovered, epoch " << m.epoch);
}

void PipelineEngine::pump(int timeout_ms) {
  if (impl_->router) impl_->pump_once(timeout_ms);
}

void PipelineEngine::shutdown() {
  Impl& m = *impl_;
  if (m.stopped || !m.router) return;
  m.stopped = true;
  v1::Envelope env;
  env.mutable_shutdown()->set_reason("coordinator shutting down");
  for (uint32_t r = 0; r < m.opt.n_workers; ++r) {
    if (!m.registry->at(r).peer.empty()) m.router->send(env, {}, m.registry->at(r).peer);
  }
  // Give the Shutdown frames a moment to leave before the socket closes (external workers
  // have no other way to learn it); local ones also get SIGTERM from the supervisor.
  m.router->socket().set(zmq::sockopt::linger, 500);
  if (m.supervisor) m.supervisor->stop_all(std::chrono::milliseconds(3000));
  m.mps.reset();  // after the workers: quits our MPS daemon, if any
  m.router.reset();
  m.remove_shm_rings();
  if (m.opt.control_endpoint.empty()) ipc::remove_ipc_endpoint_dir(m.endpoint);
}

bool PipelineEngine::needs_recovery() const {
  return impl_->needs_recovery;
}
const CacheGeometry& PipelineEngine::cache_geometry() const {
  return impl_->opt.cache;
}
const std::vector<StageRange>& PipelineEngine::layout() const {
  return impl_->layout;
}
uint32_t PipelineEngine::n_vocab() const {
  return impl_->config.n_vocab;
}
uint32_t PipelineEngine::n_layer() const {
  return impl_->config.n_layer;
}
const std::string& PipelineEngine::control_endpoint() const {
  return impl_->endpoint;
}

WorkerPulse PipelineEngine::serving_workers() const {
  const Impl& m = *impl_;
  WorkerPulse p;
  p.total = m.opt.n_workers;
  const int64_t now = now_ms();
  std::lock_guard<std::mutex> lock(m.pulse_mu);
  for (const Impl::Pulse& w : m.pulses) {
    p.serving += w.ready && 2 * (now - w.last_seen_ms) <= 3 * int64_t{m.opt.heartbeat_interval_ms};
  }
  return p;
}

std::vector<WorkerInfo> PipelineEngine::workers() const {
  const Impl& m = *impl_;
  std::vector<WorkerInfo> out;
  for (uint32_t r = 0; m.registry && r < m.opt.n_workers; ++r) {
    const WorkerEntry& e = m.registry->at(r);
    WorkerInfo w;
    w.rank = r;
    w.layers = m.layout[r];
    w.state = worker_state_name(e.state);
    w.pid = m.supervisor ? static_cast<uint32_t>(m.supervisor->pid(r)) : e.pid;
    w.restarts = m.supervisor ? m.supervisor->restarts(r) : 0;
    w.weight_bytes = e.ready.weight_bytes();
    w.pools.block_size = e.ready.kv_block_size();
    w.pools.num_blocks = e.ready.kv_blocks();
    w.pools.max_seqs = e.ready.state_slots();
    w.pools.num_snapshots = e.ready.state_snapshots();
    w.pool_bytes = e.ready.cache_bytes();
    w.pool_budget_bytes = e.ready.cache_budget_bytes();
    out.push_back(w);
  }
  return out;
}

}  // namespace ds
