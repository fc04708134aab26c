// Worker event loop (see worker_daemon.h).
#include "worker/daemon/worker_daemon.h"

#include <unistd.h>

#include <chrono>
#include <iostream>
#include <random>

#include "common/byte_size.h"
#include "common/kv_options.h"  // kv_types_name
#include "common/log.h"
#include "worker/daemon/pinned_ring.h"

namespace ds {
namespace v1 = ipc::v1;
namespace {

constexpr int kHelloRetryMs = 1000;                // Hello is repeated until Assign arrives
constexpr int kPollMs = 50;                        // bounds the reaction time to a stop request
constexpr int64_t kBusyPollAfterTrafficMs = 1000;  // busy polling only within this long of a message
// A plan's grammar masks come milliseconds after it; this long without them means the
// coordinator is gone or wedged, and the step fails rather than hangs.
constexpr int64_t kMaskWaitMs = 30000;

uint64_t random_instance_id() {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd() ^ static_cast<uint64_t>(getpid());
}

// The capacity the coordinator plans with: the pools as allocated (zeros when self-managed).
void report_pools(const LoadedStage& loaded, v1::Ready* ready) {
  const CacheGeometry& g = loaded.pools.geometry;
  if (!g.managed()) return;
  ready->set_kv_block_size(g.block_size);
  ready->set_kv_blocks(g.num_blocks);
  ready->set_state_slots(g.max_seqs);
  ready->set_state_snapshots(g.num_snapshots);
  ready->set_cache_bytes(loaded.pools.bytes);
  ready->set_cache_budget_bytes(loaded.pool_budget_bytes);
  ds::log::info("worker", ds::log::Msg() << "pools: " << g.num_blocks << " KV blocks of " << g.block_size << " tokens ("
                                         << kv_types_name(g.k_type, g.v_type) << "), " << g.max_seqs << " state slots, "
                                         << g.num_snapshots << " snapshots = " << format_bytes(loaded.pools.bytes)
                                         << " of a " << format_bytes(loaded.pool_budget_bytes) << " budget");
}

// Flags this stage's timing (the last one) as fed through a shared-memory ring.
void mark_shm_input(v1::Envelope* env) {
  auto* timings = env->has_stage_forward() ? env->mutable_stage_forward()->mutable_timings()
                                           : env->mutable_step_result()->mutable_timings();
  if (!timings->empty()) timings->Mutable(timings->size() - 1)->set_input_from_shm(true);
}

}  // namespace

WorkerDaemon::WorkerDaemon(WorkerOptions options, StageLoader loader)
    : options_(std::move(options)),
      loader_(std::move(loader)),
      instance_id_(random_instance_id()),
      busy_poll_us_(busy_poll_window_us(options_)),
      hidden_in_(pinned_ring_hooks(options_)) {
  control_ = std::make_unique<ipc::ZmqChannel>(ctx_, ipc::SocketRole::kDealer, options_.coordinator);
  heartbeat_ = std::make_unique<HeartbeatThread>(ctx_, options_.coordinator, options_.rank, instance_id_,
                                                 options_.heartbeat_ms, stats_);
}

WorkerDaemon::~WorkerDaemon() {
  heartbeat_.reset();  // join before the sockets and the context go
}

void WorkerDaemon::send_to_coordinator(const v1::Envelope& env, const std::vector<uint8_t>& bulk) {
  v1::Envelope copy = env;
  copy.set_sender_instance(instance_id_);
  if (!control_->send(copy, bulk)) ds::log::warn("worker", ds::log::Msg() << "coordinator queue full, message dropped");
}

void WorkerDaemon::send_hello() {
  v1::Envelope env;
  v1::Hello* h = env.mutable_hello();
  h->set_rank(options_.rank);
  h->set_backend(options_.backend == "cuda" ? v1::BACKEND_CUDA : v1::BACKEND_CPU);
  h->set_device(options_.device);
  h->set_pid(static_cast<uint32_t>(getpid()));
  h->set_protocol_version(ipc::kProtocolVersion);
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  h->set_memory_bytes(pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) : 0);
  h->set_n_threads(static_cast<uint32_t>(options_.threads));
  h->set_hostname(options_.hostname);
  h->set_instance_id(instance_id_);
  h->set_backend_available(backend_available(options_.backend));
  send_to_coordinator(env);
}

int WorkerDaemon::run(const std::atomic<bool>& stop) {
  ds::log::info("worker", ds::log::Msg() << "starting: " << describe(options_));
  notifier_.waiting_for_coordinator(options_.coordinator);
  int64_t next_hello = 0;
  while (!stop && !shutdown_) {
    notifier_.tick();
    if (!assign_ && steady_now_ms() >= next_hello) {
      send_hello();
      next_hello = steady_now_ms() + kHelloRetryMs;
    }
    if (handle_deferred_control()) continue;
    std::vector<ipc::ZmqChannel*> channels{control_.get()};
    if (data_in_) channels.push_back(data_in_.get());
    // Busy polling only right after traffic: an idle worker sleeps in the poll.
    const bool recent = steady_now_ms() - last_message_ms_ < kBusyPollAfterTrafficMs;
    const int ready = ipc::poll_channels(channels, kPollMs, recent ? busy_poll_us_ : 0);
    if (ready < 0) continue;
    drain(*channels[static_cast<size_t>(ready)], ready == 1);
    last_message_ms_ = steady_now_ms();
  }
  ds::log::info("worker", ds::log::Msg() << "exiting");
  notifier_.stopping();
  return 0;
}

// Handles every message already queued on `channel`. Returns false when nothing was there.
bool WorkerDaemon::drain(ipc::ZmqChannel& channel, bool is_data) {
  bool any = false;
  for (;;) {
    if (handle_deferred_control()) any = true;  // they came before anything still queued
    if (shutdown_) return any;
    ipc::Received msg;
    std::string why;
    const ipc::RecvStatus st = channel.recv(&msg, 0, &why);
    if (st == ipc::RecvStatus::kTimeout) return any;
    any = true;
    if (st == ipc::RecvStatus::kRejected) {
      ds::log::warn("worker", ds::log::Msg() << "dropped a frame: " << why);
      continue;
    }
    if (is_data) {
      on_data(msg);
    } else {
      on_control(msg);
    }
    notifier_.tick();  // a steady stream of steps may keep this loop from returning for long
    if (shutdown_) return any;
  }
}

void WorkerDaemon::on_control(const ipc::Received& msg) {
  const v1::Envelope& env = msg.env;
  switch (env.body_case()) {
    case v1::Envelope::kAssign:
      handle_assign(env.assign());
      break;
    case v1::Envelope::kDropSequences:
      handle_drop(env.drop_sequences());
      break;
    case v1::Envelope::kShutdown:
      ds::log::info("worker", ds::log::Msg() << "shutdown: " << env.shutdown().reason());
      shutdown_ = true;
      break;
    case v1::Envelope::kStepPlan:
      handle_step(env.step_plan(), msg.bulk, {});
      break;
    case v1::Envelope::kStepMasks:
      keep_masks(env.step_masks());
      break;
    default:
      ds::log::warn("worker", ds::log::Msg() << "ignored unexpected control message " << ipc::body_name(env));
  }
}

void WorkerDaemon::on_data(const ipc::Received& msg) {
  if (msg.env.body_case() != v1::Envelope::kStageForward) {
    ds::log::warn("worker", ds::log::Msg() << "ignored unexpected data message " << ipc::body_name(msg.env));
    return;
  }
  const v1::StageForward& fwd = msg.env.stage_forward();
  const v1::HiddenChunk& chunk = fwd.hidden();
  // Hands the chunk's ring slot back to the previous stage (a no-op for inline chunks, and safe
  // twice: a slot is only freed while it still holds this chunk's message).
  auto input_done = [this, &chunk] { return hidden_in_.release(chunk); };
  if (fwd.plan().epoch() < epoch_) {
    input_done();
    ds::log::warn("worker", ds::log::Msg() << "discarded stale plan " << fwd.plan().plan_id());
    return;
  }
  std::span<const uint8_t> hidden;
  std::optional<ipc::HiddenReceiver::Landing> landing;
  try {
    if (chunk.dtype() != v1::DTYPE_F32) throw std::runtime_error("hidden chunk is not f32");
    hidden = hidden_in_.resolve(chunk, msg.bulk);
    landing = hidden_in_.landing(chunk);
  } catch (const std::exception& e) {
    // Not handed back: an inconsistent descriptor may name a slot another message holds. A
    // slot leaked this way costs the sender a wait and an inline send per lap of the ring,
    // until the next recovery gives it a fresh ring.
    report_step_error(fwd.plan(), std::string("bad hidden chunk: ") + e.what());
    return;
  }
  handle_step(fwd.plan(), hidden, fwd.timings(), input_done, chunk.has_shm(), landing);
}

void WorkerDaemon::handle_assign(const v1::Assign& assign) {
  if (assign_) {
    ds::log::warn("worker", ds::log::Msg() << "ignored a second Assign");
    return;
  }
  v1::Envelope reply;
  v1::Ready* ready = reply.mutable_ready();
  ready->set_rank(options_.rank);
  ready->set_instance_id(instance_id_);
  const auto t0 = std::chrono::steady_clock::now();
  notifier_.loading(assign.first_layer(), assign.last_layer());
  try {
    if (assign.rank() != options_.rank) throw std::runtime_error("Assign for rank " + std::to_string(assign.rank()));
    if (!backend_available(options_.backend)) {
      throw std::runtime_error("the " + options_.backend +
                               " backend is not available in this build or on this machine");
    }
    const int threads = assign.n_threads() != 0 ? static_cast<int>(assign.n_threads()) : options_.threads;
    LoadedStage loaded = loader_(assign, options_, threads);
    if (!loaded.model) throw std::runtime_error("the loader returned no stage");
    loaded.shape.rank = options_.rank;
    if (assign.memory_budget_bytes() != 0 && loaded.weight_bytes > assign.memory_budget_bytes()) {
      throw std::runtime_error("slice needs " + std::to_string(loaded.weight_bytes) + " bytes of weights, budget is " +
                               std::to_string(assign.memory_budget_bytes()));
    }
    if (!assign.is_first())
      data_in_ = std::make_unique<ipc::ZmqChannel>(ctx_, ipc::SocketRole::kPull, assign.data_bind_endpoint());
    if (!assign.is_last()) {
      data_out_ = std::make_unique<ipc::ZmqChannel>(ctx_, ipc::SocketRole::kPush, assign.next_stage_endpoint());
      hidden_out_ = make_hidden_sender(assign.next_stage_endpoint());
    }
    runner_ = std::make_unique<StageRunner>(std::move(loaded.model), loaded.shape);
    runner_->wait_for_landing_on_host(options_.early_handoff == "host");
    ready->set_ok(true);
    ready->set_weight_bytes(loaded.weight_bytes);
    report_pools(loaded, ready);
  } catch (const std::exception& e) {
    ready->set_ok(false);
    ready->set_error(e.what());
    data_in_.reset();
    hidden_out_.reset();
    data_out_.reset();
  }
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0);
  ready->set_load_ms(static_cast<uint32_t>(ms.count()));
  assign_ = assign;  // also after a failure: the coordinator decides what happens next
  epoch_ = assign.epoch();
  ds::log::info("worker", ds::log::Msg() << "layers [" << assign.first_layer() << ", " << assign.last_layer() << ") "
                                         << (ready->ok() ? "ready" : "failed: " + ready->error()) << " in "
                                         << ms.count() << " ms");
  send_to_coordinator(reply);
  if (ready->ok()) {
    notifier_.ready(assign.first_layer(), assign.last_layer(), ms.count());
  } else {
    notifier_.load_failed(ready->error());
  }
}

// The sender of this stage's hidden states: a shared-memory ring when the next stage is on this
// host (ipc://) and not forced inline; named per (run, stage pair) so a restart recreates it.
std::unique_ptr<ipc::HiddenSender> WorkerDaemon::make_hidden_sender(const std::string& next_endpoint) {
  ipc::HiddenTransport mode = ipc::HiddenTransport::kAuto;
  ipc::parse_hidden_transport(options_.hidden_transport, &mode);
  const bool ring = ipc::uses_shm_ring(mode, next_endpoint);
  ds::log::info("worker",
                ds::log::Msg() << "hidden states to the next stage: " << (ring ? "shared-memory ring" : "inline"));
  // Pinned on a CUDA worker, so the device-to-host copy of a chunk lands in the slot at full speed.
  return std::make_unique<ipc::HiddenSender>(*data_out_, ring ? ipc::shm_ring_name(next_endpoint) : std::string(),
                                             ipc::HiddenRingOptions{}, instance_id_, pinned_ring_hooks(options_));
}

void WorkerDaemon::handle_drop(const v1::DropSequences& drop) {
  if (runner_) runner_->drop(drop);
  // A new epoch means a recovery: every older message is discarded, and a restarted next stage
  // never hands back the slots its predecessor held, so the next chunk starts a fresh ring.
  if (hidden_out_ && drop.epoch() > epoch_) hidden_out_->restart();
  epoch_ = std::max(epoch_, drop.epoch());
  stats_.n_sequences = runner_ ? static_cast<uint32_t>(runner_->n_sequences()) : 0;
  v1::Envelope reply;
  v1::DropSequencesDone* done = reply.mutable_drop_sequences_done();
  done->set_rank(options_.rank);
  done->set_request_id(drop.request_id());
  done->set_epoch(epoch_);
  send_to_coordinator(reply);
}

void WorkerDaemon::report_step_error(const v1::StepPlan& plan, const std::string& why) {
  ds::log::error("worker", ds::log::Msg() << "plan " << plan.plan_id() << " failed: " << why);
  v1::Envelope env;
  v1::StepError* err = env.mutable_step_error();
  err->set_plan_id(plan.plan_id());
  err->set_epoch(plan.epoch());
  err->set_rank(options_.rank);
  err->set_message(why);
  send_to_coordinator(env);
}

void WorkerDaemon::handle_step(const v1::StepPlan& plan, std::span<const uint8_t> hidden,
                               const google::protobuf::RepeatedPtrField<v1::StageTiming>& timings,
                               const std::function<bool()>& input_done, bool input_from_shm,
                               const std::optional<ipc::HiddenReceiver::Landing>& landing) {
  auto finish_input = [&input_done] { return !input_done || input_done(); };
  if (!runner_) {
    finish_input();
    return report_step_error(plan, "worker has no loaded stage");
  }
  if (plan.epoch() < epoch_) {
    // Left over from before a recovery: its sequences were dropped and will be re-prefilled.
    finish_input();
    ds::log::warn("worker", ds::log::Msg() << "discarded stale plan " << plan.plan_id());
    return;
  }
  stats_.busy_since_ms = steady_now_ms();
  if (landing) {
    if (!landing_watch_) landing_watch_ = std::make_unique<LandingWatch>();
    landing_watch_->arm(landing->ready, landing->producer_pid);
  }
  // Only stage 0 (its input is the plan itself) hands its output over before it lands: a later
  // stage would first have to wait for its own input's copy before handing that slot back.
  const bool may_land_later = options_.early_handoff != "off" && !input_done;
  try {
    // A middle stage's output goes straight into the next stage's ring slot (no staging copy).
    HiddenBuffer in_place;
    if (hidden_out_) in_place = [this, may_land_later](size_t n) { return reserve_output(n, may_land_later); };
    early_masks_.erase(early_masks_.begin(), early_masks_.lower_bound(plan.plan_id()));  // of plans done
    const MaskFetch fetch = [this](const v1::StepPlan& p) { return await_masks(p); };
    StageOutputMessage out =
        runner_->run(plan, hidden, timings, in_place, landing ? landing->ready : HostSignal{}, fetch);
    // run() returned after its device consumed the input (this stage's output is in place):
    // had the watch to release the wait, the input was never written.
    if (landing && landing_watch_->disarm())
      throw std::runtime_error("the previous stage died before its hidden states landed");
    // The forward has consumed its input (uploaded it, on CUDA): the slot goes back now, and
    // the output is only trusted when the slot still held our chunk throughout.
    if (!finish_input()) throw std::runtime_error("input ring slot was overwritten while being read");
    if (input_from_shm) mark_shm_input(&out.env);
    if (hidden_out_) {
      const bool sent = out.hidden_in_place ? hidden_out_->send_reserved(std::move(out.env), out.hidden_deferred)
                                            : hidden_out_->send(std::move(out.env), out.bulk);
      if (!sent) report_step_error(plan, "next stage queue full");
    } else {
      send_to_coordinator(out.env, out.bulk);
    }
    ++stats_.steps_done;
  } catch (const std::exception& e) {
    if (landing) landing_watch_->disarm();
    finish_input();
    if (hidden_out_) hidden_out_->abandon();
    report_step_error(plan, e.what());
  }
  stats_.busy_since_ms = 0;
  stats_.n_sequences = static_cast<uint32_t>(runner_->n_sequences());
}

v1::StepMasks WorkerDaemon::await_masks(const v1::StepPlan& plan) {
  const int64_t deadline = steady_now_ms() + kMaskWaitMs;
  for (;;) {
    if (const auto it = early_masks_.find(plan.plan_id()); it != early_masks_.end()) {
      v1::StepMasks masks = std::move(it->second);
      early_masks_.erase(it);
      return masks;
    }
    const int64_t left = deadline - steady_now_ms();
    if (left <= 0) {
      throw std::runtime_error("the grammar masks of plan " + std::to_string(plan.plan_id()) + " did not come within " +
                               std::to_string(kMaskWaitMs) + " ms");
    }
    ipc::Received msg;
    std::string why;
    const ipc::RecvStatus st = control_->recv(&msg, static_cast<int>(left), &why);
    if (st == ipc::RecvStatus::kTimeout) continue;
    if (st == ipc::RecvStatus::kRejected) {
      ds::log::warn("worker", ds::log::Msg() << "dropped a frame: " << why);
    } else if (msg.env.body_case() == v1::Envelope::kStepMasks) {
      keep_masks(msg.env.step_masks());
    } else {
      deferred_control_.push_back(std::move(msg));
    }
  }
}

void WorkerDaemon::keep_masks(const v1::StepMasks& masks) {
  if (masks.epoch() < epoch_) return;  // of a plan from before a recovery: never run
  early_masks_[masks.plan_id()] = masks;
}

bool WorkerDaemon::handle_deferred_control() {
  if (deferred_control_.empty()) return false;
  while (!deferred_control_.empty() && !shutdown_) {
    const ipc::Received msg = std::move(deferred_control_.front());
    deferred_control_.pop_front();
    on_control(msg);
  }
  return true;
}

HiddenDestination WorkerDaemon::reserve_output(size_t nbytes, bool may_land_later) {
  HiddenDestination dst{hidden_out_->reserve(nbytes), {}};
  if (may_land_later) {
    if (const std::optional<HostSignal> ready = hidden_out_->reserved_ready()) dst.ready = *ready;
  }
  return dst;
}

}  // namespace ds
