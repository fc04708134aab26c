#include "coordinator/serving/batch_engine.h"

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <utility>

#include "common/log.h"
#include "coordinator/engine/engine.h"

namespace ds {
namespace {

// Uniform double in [0, 1) from 53 random bits.
double uniform01(std::mt19937_64& rng) {
  return static_cast<double>(rng() >> 11) * 0x1.0p-53;
}

SamplingRule rule_of(const SamplingParams& p) {
  SamplingRule r;
  r.temperature = p.temperature;
  r.top_k = p.top_k > 0 ? static_cast<uint32_t>(p.top_k) : 0;
  r.top_p = p.top_p;
  r.min_p = p.min_p;
  return r;
}

// logit_bias, and min_tokens masking the end-of-generation ids and stop_token_ids (unless the
// request ignores end-of-generation: then only its stop ids).
LogitAdjust adjust_of(const GenerationRequest& req, const std::vector<int32_t>& eos_ids) {
  LogitAdjust a;
  a.bias = req.sampling.logit_bias;
  a.prompt_len = static_cast<uint32_t>(req.prompt_ids.size());
  a.min_tokens = req.sampling.min_tokens;
  a.repetition_penalty = req.sampling.repetition_penalty;
  a.frequency_penalty = req.sampling.frequency_penalty;
  a.presence_penalty = req.sampling.presence_penalty;
  if (a.min_tokens > 0) {
    a.masked = req.sampling.stop_token_ids;
    if (!req.sampling.ignore_eos) a.masked.insert(a.masked.end(), eos_ids.begin(), eos_ids.end());
    std::sort(a.masked.begin(), a.masked.end());
    a.masked.erase(std::unique(a.masked.begin(), a.masked.end()), a.masked.end());
  }
  return a;
}

// The scheduler's placement of one row, as the workers apply it.
SeqCache placement_of(const ScheduledSeq& s) {
  SeqCache c;
  c.state_slot = s.state_slot;
  c.is_new = s.is_new;
  c.load_snapshot = s.load_snapshot;
  c.save_snapshot = s.save_snapshot;
  c.block_ids = s.block_ids;
  return c;
}

// Workers may hold more than the scheduler uses (they sized their pools from their own memory
// budgets), never less: every id the scheduler hands out must exist on every worker.
bool workers_hold(const CacheGeometry& workers, const CacheGeometry& plan) {
  return workers.block_size == plan.block_size && workers.num_blocks >= plan.num_blocks &&
         workers.max_seqs >= plan.max_seqs && workers.num_snapshots >= plan.num_snapshots;
}

// A plan none of whose rows is sampled (prefill chunks only): nothing it returns changes what
// the scheduler plans next, so the next plan can be made before its result is in.
// Prompt-logprob rows count as sampling: their results must come back.
bool samples_nothing(const StepPlan& plan) {
  return std::none_of(plan.seqs.begin(), plan.seqs.end(),
                      [](const ScheduledSeq& s) { return s.needs_logits || s.prompt_rows; });
}

}  // namespace

CacheGeometry worker_cache_geometry(const SchedulerConfig& s) {
  CacheGeometry g;
  g.block_size = s.block_size;
  g.num_blocks = s.num_blocks;
  g.max_seqs = s.max_seqs;
  g.num_snapshots = s.num_snapshots;
  return g;
}

// The scheduler may have as many steps in flight as the engine sends.
BatchEngineOptions with_plan_depth(BatchEngineOptions o) {
  o.max_plans_in_flight = std::max({o.max_plans_in_flight, o.scheduler.decode_groups, 1u});
  o.scheduler.max_steps_in_flight = o.max_plans_in_flight;
  return o;
}

BatchEngine::BatchEngine(PipelineEngine& pipeline, BatchEngineOptions options)
    : pipeline_(pipeline), opt_(with_plan_depth(std::move(options))), scheduler_(opt_.scheduler) {
  if (!workers_hold(pipeline_.cache_geometry(), worker_cache_geometry(opt_.scheduler)) ||
      opt_.scheduler.num_blocks == 0) {
    throw std::invalid_argument("the scheduler plans with more memory than the workers hold (or other block sizes)");
  }
  update_health();
}

BatchEngine::~BatchEngine() {
  stop();
}

void BatchEngine::start() {
  thread_ = std::thread([this] { loop(); });
}

void BatchEngine::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void BatchEngine::submit(GenerationRequest request, std::shared_ptr<GenerationSink> sink) {
  const uint32_t limit = opt_.scheduler.max_context;
  if (request.prompt_ids.empty()) throw std::invalid_argument("the prompt is empty");
  if (request.prompt_ids.size() >= limit) {
    throw std::invalid_argument("the prompt has " + std::to_string(request.prompt_ids.size()) +
                                " tokens; the context limit is " + std::to_string(limit));
  }
  if (request.pooled) {  // one row, the last prompt position's: nothing sampled, nothing to limit
    request.sampling = SamplingParams{};
    request.sampling.temperature = 0.0f;
    request.sampling.max_tokens = 1;
    request.sampling.ignore_eos = true;
    request.constraint.reset();
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) throw std::runtime_error("the server is shutting down");
    inbox_.emplace_back(std::move(request), std::move(sink));
  }
  cv_.notify_all();
}

void BatchEngine::cancel(const std::string& request_id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    cancels_.push_back(request_id);
  }
  cv_.notify_all();
}

EngineHealth BatchEngine::health() const {
  std::lock_guard<std::mutex> lock(mu_);
  EngineHealth h = health_;
  // Submissions not yet taken by the loop wait too (admission control counts them).
  h.queue_depth += static_cast<uint32_t>(inbox_.size()) + taking_;
  // Readiness is read live, not from the loop's last update: while a step waits on a stopped
  // worker, or a recovery runs, the loop updates nothing.
  const WorkerPulse pulse = pipeline_.serving_workers();
  h.workers_ready = pulse.serving;
  h.ready = pulse.total > 0 && pulse.serving == pulse.total;
  return h;
}

void BatchEngine::update_health() {
  EngineHealth h;
  for (const WorkerInfo& w : pipeline_.workers()) {
    ++h.workers_total;
    h.workers_ready += w.state == "ready";
    h.worker_restarts += w.restarts;
  }
  h.ready = h.workers_total > 0 && h.workers_ready == h.workers_total;
  const SchedulerStats s = scheduler_.stats();
  h.queue_depth = s.waiting;
  h.running = s.running;
  h.max_context = opt_.scheduler.max_context;
  h.prefix_cache_queried_tokens = s.prefix_queried_tokens;
  h.prefix_cache_hit_tokens = s.prefix_hit_tokens;
  h.kv_blocks_total = opt_.scheduler.num_blocks;
  h.kv_blocks_used = opt_.scheduler.num_blocks - std::min(s.free_blocks, opt_.scheduler.num_blocks);
  h.kv_block_size = opt_.scheduler.block_size;
  h.kv_cache_type = opt_.kv_cache_type;
  h.kv_bytes_per_token = opt_.kv_bytes_per_token;
  h.slots_total = opt_.scheduler.max_seqs;
  h.slots_used = opt_.scheduler.max_seqs - std::min(s.free_slots, opt_.scheduler.max_seqs);
  h.preemptions = s.preemptions;
  h.spec = s.spec;
  h.steps = steps_;
  h.step_host_seconds = host_seconds_;
  h.step_wait_seconds = wait_seconds_;
  std::lock_guard<std::mutex> lock(mu_);
  health_ = h;
  taking_ = 0;
}

void BatchEngine::finish(const std::string& id, FinishReason reason, const std::string& error) {
  auto it = active_.find(id);
  if (it == active_.end()) return;
  std::shared_ptr<GenerationSink> sink = it->second.sink;
  active_.erase(it);
  sink->on_finished(reason, error);
}

// Moves submissions into the scheduler and applies cancellations (loop thread).
void BatchEngine::take_inbox() {
  std::deque<std::pair<GenerationRequest, std::shared_ptr<GenerationSink>>> inbox;
  std::vector<std::string> cancels;
  {
    std::lock_guard<std::mutex> lock(mu_);
    inbox.swap(inbox_);
    cancels.swap(cancels_);
    taking_ = static_cast<uint32_t>(inbox.size());
  }
  for (auto& [req, sink] : inbox) {
    if (active_.count(req.request_id)) {
      sink->on_finished(FinishReason::kError, "duplicate request id " + req.request_id);
      continue;
    }
    try {
      scheduler_.add_request(req);
    } catch (const std::exception& e) {
      sink->on_finished(FinishReason::kError, e.what());
      continue;
    }
    Active a;
    a.sink = std::move(sink);
    a.seq_id = next_seq_id_++;
    a.rule = rule_of(req.sampling);
    a.adjust = adjust_of(req, opt_.scheduler.eos_token_ids);
    a.rng.seed(req.sampling.seed ? *req.sampling.seed
                                 : std::random_device{}() ^ (uint64_t{std::random_device{}()} << 32));
    a.prompt_tokens = static_cast<uint32_t>(req.prompt_ids.size());
    a.want_top = req.sampling.logprobs;
    a.top_logprobs = req.sampling.top_logprobs;
    if (req.sampling.prompt_logprobs) {
      a.prompt = req.prompt_ids;
      a.prompt_logprobs.resize(req.prompt_ids.size() - 1);
    }
    if (req.constraint) a.constraint.emplace(*req.constraint);
    a.pooled = req.pooled;
    a.images = req.images;  // the pixels are shared, not copied
    active_.emplace(req.request_id, std::move(a));
  }
  for (const std::string& id : cancels) {
    if (scheduler_.abort(id)) finish(id, FinishReason::kCancelled, "");
  }
  // The queue moved from the inbox into the scheduler: keep health() (admission control) exact.
  if (!inbox.empty() || !cancels.empty()) update_health();
}

void BatchEngine::deliver(const StepOutcome& outcome, const StepPlan& plan) {
  // Rows come back in plan order: per sequence that asked for logits its logit rows (one, or
  // the n_draft + 1 verify rows, whose first accepted + 1 carry the emitted tokens in order).
  SampledStep out;
  out.step_id = plan.step_id;
  out.sampled.assign(plan.seqs.size(), -1);
  take_prompt_logprobs(outcome, plan);
  std::unordered_map<uint64_t, std::vector<const RowResult*>> by_seq;
  for (const RowResult& r : outcome.rows) {
    if (!r.forced) by_seq[r.seq_id].push_back(&r);
  }
  std::unordered_map<uint64_t, const SpecResult*> spec_of;
  for (const SpecResult& r : outcome.spec) spec_of[r.seq_id] = &r;
  if (opt_.scheduler.spec_k > 0) {
    out.accepted.assign(plan.seqs.size(), 0);
    out.drafts.assign(plan.seqs.size(), {});
  }
  // The result rows of each request's tokens, in emission order.
  std::unordered_map<std::string, std::vector<const RowResult*>> by_request;
  for (size_t i = 0; i < plan.seqs.size(); ++i) {
    const ScheduledSeq& s = plan.seqs[i];
    if (!s.needs_logits) continue;
    auto a = active_.find(s.request_id);
    if (a == active_.end()) continue;
    auto r = by_seq.find(a->second.seq_id);
    if (r == by_seq.end() || r->second.size() != s.n_draft + 1) {
      throw StepFailed("step result lacks rows of sequence " + s.request_id);
    }
    uint32_t accepted = 0;
    if (s.n_draft > 0 || s.spec_k > 0) {
      auto v = spec_of.find(a->second.seq_id);
      if (v == spec_of.end()) throw StepFailed("step result lacks the speculative verdict of " + s.request_id);
      accepted = std::min(v->second->accepted, s.n_draft);
      out.accepted[i] = accepted;
      out.drafts[i] = v->second->drafts;
    }
    out.sampled[i] = r->second[accepted]->token;
    by_request[s.request_id] = r->second;
  }
  const UpdateResult result = scheduler_.update_from_output(out);
  std::unordered_map<std::string, size_t> emitted;        // tokens of each request delivered so far
  std::vector<std::pair<std::string, std::string>> ends;  // constrained requests to end: id, error
  for (const TokenEvent& t : result.tokens) {
    auto a = active_.find(t.request_id);
    if (a == active_.end()) continue;
    if (a->second.constraint &&
        std::any_of(ends.begin(), ends.end(), [&](const auto& e) { return e.first == t.request_id; })) {
      continue;  // ended by its grammar at an earlier token of this step
    }
    const RowResult& row = *by_request.at(t.request_id).at(emitted[t.request_id]++);
    if (t.first) {
      if (!a->second.prompt.empty()) a->second.sink->on_prompt_logprobs(a->second.prompt_logprobs);
      a->second.sink->on_started(a->second.prompt_tokens);
    }
    if (a->second.pooled) {  // its one row is the answer: the scheduler ends it (one token at most)
      a->second.sink->on_pooled(row.pooled);
      continue;
    }
    const bool more = !a->second.constraint || constraint_allows_more(a->second, t.request_id, t.token, ends);
    if (!more && !ends.back().second.empty()) continue;  // a refused token is not emitted
    GeneratedToken g = generated_token(a->second, row);
    g.token = t.token;
    a->second.sink->on_token(g);
  }
  for (const FinishEvent& f : result.finished) {
    auto a = active_.find(f.request_id);
    if (a != active_.end()) a->second.sink->on_cached(f.cached_tokens);
    if (a != active_.end() && opt_.scheduler.spec_k > 0) a->second.sink->on_speculation(f.spec);
    const bool pooled = a != active_.end() && a->second.pooled;
    finish(f.request_id, pooled ? FinishReason::kStop : f.reason, "");
  }
  // A complete grammar ends its request as a stop (only the end of generation could follow);
  // a refused token is an error (a mask that was not applied: never expected).
  for (const auto& [id, error] : ends) {
    if (active_.count(id) == 0) continue;
    scheduler_.abort(id);
    finish(id, error.empty() ? FinishReason::kStop : FinishReason::kError, error);
  }
}

bool BatchEngine::constraint_allows_more(Active& a, const std::string& id, int32_t token,
                                         std::vector<std::pair<std::string, std::string>>& ends) {
  if (!a.constraint->accept(token)) {
    ends.emplace_back(id, "structured output: the grammar refused token " + std::to_string(token));
    return false;
  }
  if (!a.constraint->complete()) return true;
  ends.emplace_back(id, "");
  return false;
}

// The rows of the plan that sample under a grammar; their masks will follow the plan.
std::vector<BatchEngine::ConstrainedRow> BatchEngine::constrained_rows(const StepPlan& plan,
                                                                       std::vector<SeqRequest>* reqs) {
  std::vector<ConstrainedRow> rows;
  for (size_t i = 0; i < plan.seqs.size(); ++i) {
    const ScheduledSeq& s = plan.seqs[i];
    if (!s.needs_logits) continue;
    Active& a = active_.at(s.request_id);
    if (!a.constraint) continue;
    rows.push_back(ConstrainedRow{i, &*a.constraint});
    (*reqs)[i].masks_follow = true;
  }
  return rows;
}

// The grammar masks of the constrained rows, computed in parallel (each request's matcher is
// used by one task).
void BatchEngine::fill_constraint_masks(const std::vector<ConstrainedRow>& rows, const StepPlan& plan,
                                        std::vector<SeqRequest>& reqs) {
  if (!mask_pool_ && rows.size() > 1) mask_pool_ = std::make_unique<ParallelFor>(ParallelFor::default_helpers());
  const auto fill = [&](size_t j) {
    const size_t i = rows[j].seq;
    rows[j].state->fill_masks(plan.seqs[i].n_draft, &reqs[i]);
  };
  if (mask_pool_) {
    mask_pool_->run(rows.size(), fill);
  } else {
    fill(0);
  }
}

GeneratedToken BatchEngine::generated_token(const Active& a, const RowResult& row) const {
  GeneratedToken g;
  g.token = row.token;
  g.logprob = row.token_logprob;
  const size_t n_top = std::min<size_t>(a.top_logprobs, row.top_ids.size());
  for (size_t k = 0; k < n_top; ++k) g.top_logprobs.push_back({row.top_ids[k], row.top_logprobs[k]});
  return g;
}

// The forced rows of a step: prompt logprobs, stored by position (a prompt recomputed after a
// preemption overwrites the same entries).
void BatchEngine::take_prompt_logprobs(const StepOutcome& outcome, const StepPlan& plan) {
  std::unordered_map<uint64_t, const ScheduledSeq*> seq_of;
  for (const ScheduledSeq& s : plan.seqs) {
    if (!s.prompt_rows) continue;
    if (auto a = active_.find(s.request_id); a != active_.end()) seq_of[a->second.seq_id] = &s;
  }
  if (seq_of.empty()) return;  // the usual step: no prompt rows
  for (const RowResult& r : outcome.rows) {
    if (!r.forced) continue;
    const auto s = seq_of.find(r.seq_id);
    if (s == seq_of.end()) continue;  // finished meanwhile
    Active& a = active_.at(s->second->request_id);
    const size_t pos = s->second->start_pos + r.row;
    if (pos + 1 >= a.prompt.size() || r.token != a.prompt[pos + 1]) {
      throw StepFailed("step result: a prompt logprob row that does not fit its prompt");
    }
    a.prompt_logprobs[pos] = generated_token(a, r);
  }
}

// Released sequences (finished, aborted, preempted) may already be gone from active_, so the
// workers' seq ids come from placed_. Releases are idempotent on the workers: after a failed
// step they are simply sent again.
void BatchEngine::note_released(const StepPlan& plan) {
  for (const ReleasedSeq& r : plan.released) {
    auto p = placed_.find(r.request_id);
    if (p == placed_.end()) continue;
    to_release_.push_back(p->second);
    placed_.erase(p);
  }
}

SeqRequest BatchEngine::request_of(const ScheduledSeq& s) {
  Active& a = active_.at(s.request_id);
  SeqRequest r;
  r.seq_id = a.seq_id;
  r.start_pos = s.start_pos;
  r.tokens = s.token_ids;
  r.sampling = a.rule;
  r.adjust = a.adjust;
  r.history = s.history;
  r.cache = placement_of(s);
  r.n_draft = s.n_draft;
  r.rewind = s.rewind;
  r.spec_k = s.spec_k;
  r.images = s.images;
  // Stage 0 needs the pixels of the images with token rows in this row (a chunk cut inside an
  // image brings it again; the worker encodes it once).
  const uint64_t end = uint64_t{s.start_pos} + s.token_ids.size();
  for (const PromptImage& im : a.images) {
    if (im.span.first_pos < end && im.span.end_pos() > s.start_pos) r.image_pixels.push_back({im.span.hash, im.pixels});
  }
  if (s.prompt_rows) {  // the logprob of each following prompt token; no random number drawn
    for (uint32_t j = 0; j < s.token_ids.size() && s.start_pos + j + 1 < a.prompt.size(); ++j) {
      r.logit_rows.push_back(j);
      r.random_u.push_back(0.0);
      r.forced_tokens.push_back(a.prompt[s.start_pos + j + 1]);
    }
  }
  if (s.needs_logits) {
    // Every verify row (the row before the drafts and one per draft) needs logits.
    for (uint32_t j = 0; j <= s.n_draft; ++j) {
      r.logit_rows.push_back(static_cast<uint32_t>(s.token_ids.size() - 1 - s.n_draft + j));
      r.random_u.push_back(uniform01(a.rng));
    }
    if (!r.forced_tokens.empty()) r.forced_tokens.push_back(-1);
    const uint32_t spec_numbers = r.speculates() ? s.n_draft + s.spec_k : 0;
    for (uint32_t j = 0; j < spec_numbers; ++j) r.spec_random_u.push_back(uniform01(a.rng));
  }
  placed_[s.request_id] = a.seq_id;
  return r;
}

// Plans one step and sends it; false when nothing can run now (every live sequence is in a
// step in flight, or waits for memory). A plan that samples nothing is applied at once: its
// "result" is known (no token), which is what lets the scheduler plan the next chunk of the
// same prompt while this one computes; every stage runs the plans in order, so the workers
// compute exactly what the one-plan-at-a-time loop computes.
bool BatchEngine::send_next_plan() {
  StepPlan plan = scheduler_.schedule();
  note_released(plan);
  if (plan.empty()) return false;  // the releases ride on the next step
  std::vector<SeqRequest> reqs;
  for (const ScheduledSeq& s : plan.seqs) reqs.push_back(request_of(s));
  const std::vector<ConstrainedRow> constrained = constrained_rows(plan, &reqs);
  flying_.push_back(Flying{std::move(plan), std::exchange(to_release_, {}), false});
  pipeline_.submit(reqs, flying_.back().released);
  if (!constrained.empty()) {
    // The workers run the step while the masks are computed; the last stage waits for them at
    // its LM head only.
    try {
      fill_constraint_masks(constrained, flying_.back().plan, reqs);
    } catch (const std::exception& e) {
      pipeline_.abandon_masks(e.what());
      throw;
    }
    pipeline_.send_masks(reqs);
  }
  if (samples_nothing(flying_.back().plan)) {
    deliver(StepOutcome{}, flying_.back().plan);  // no tokens: only the scheduler's bookkeeping
    flying_.back().delivered = true;
  }
  return true;
}

// Plans in flight whose result samples tokens (the others were applied when sent).
size_t BatchEngine::sampling_in_flight() const {
  return static_cast<size_t>(
      std::count_if(flying_.begin(), flying_.end(), [](const Flying& f) { return !f.delivered; }));
}

// Fills the pipeline up to max_plans_in_flight plans, then collects the oldest result. Once
// decode_groups plans that sample are out, nothing more is sent until one comes back: a request
// arriving meanwhile joins the next group's step (one weight read for both) instead of running
// as a step of its own, and with one group this is the one-sampling-plan-at-a-time loop (a long
// prompt's prefill-only chunks still go out ahead of its last chunk).
void BatchEngine::run_step() {
  using Clock = std::chrono::steady_clock;
  const auto seconds = [](Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double>(b - a).count();
  };
  try {
    const auto t0 = Clock::now();
    while (flying_.size() < opt_.max_plans_in_flight && sampling_in_flight() < opt_.scheduler.decode_groups &&
           send_next_plan()) {
    }
    if (flying_.empty()) return;
    if (flying_.size() > 1 && !pipelined_once_) {  // told once, so an operator (and the e2e test) can see it happen
      pipelined_once_ = true;
      log::info("engine", log::Msg() << "pipelining: " << flying_.size()
                                     << " plans in flight at once (the first time; --pipeline-depth "
                                     << opt_.max_plans_in_flight << ", --decode-groups " << opt_.scheduler.decode_groups
                                     << ")");
    }
    const auto t1 = Clock::now();
    const StepOutcome outcome = pipeline_.collect();
    const auto t2 = Clock::now();
    Flying oldest = std::move(flying_.front());
    flying_.pop_front();
    if (!oldest.delivered) deliver(outcome, oldest.plan);
    ++steps_;
    host_seconds_ += seconds(t0, t1) + seconds(t2, Clock::now());
    wait_seconds_ += seconds(t1, t2);
  } catch (...) {
    // Every step in flight is lost with the failure (the caller resets the scheduler's worker
    // state). Releases are idempotent on the workers: they are simply sent again.
    for (const Flying& f : flying_) to_release_.insert(to_release_.end(), f.released.begin(), f.released.end());
    flying_.clear();
    drain_pipeline();
    throw;
  }
  recoveries_in_a_row_ = 0;
}

// Waits out and drops the results of steps still in flight (a failure in between left them
// there), so the next plan's result is the next one collected.
void BatchEngine::drain_pipeline() {
  while (pipeline_.in_flight() > 0) {
    try {
      pipeline_.collect();
    } catch (const std::exception&) {
      return;  // the pipeline forgot every step in flight
    }
  }
}

void BatchEngine::fail_all(const std::string& error, FinishReason reason) {
  std::vector<std::string> ids;
  for (const auto& [id, a] : active_) ids.push_back(id);
  for (const std::string& id : ids) {
    scheduler_.abort(id);
    finish(id, reason, error);
  }
}

void BatchEngine::loop() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (stopping_) break;
      if (inbox_.empty() && cancels_.empty() && !scheduler_.has_unfinished()) {
        // Idle: sleep on the inbox (submit / cancel / stop wake it at once), then handle the
        // control traffic (heartbeats, restarts) that queued meanwhile. Sleeping in the pipeline's
        // pump instead left a new request waiting up to idle_pump_ms before its first step
        // (time to first token well above the prefill's: docs/history/performance-2026-11.md, session 6).
        cv_.wait_for(lock, std::chrono::milliseconds(opt_.idle_pump_ms),
                     [this] { return stopping_ || !inbox_.empty() || !cancels_.empty(); });
        lock.unlock();
        pipeline_.pump(0);
        update_health();
        continue;
      }
    }
    take_inbox();
    if (!scheduler_.has_unfinished()) continue;
    try {
      run_step();
    } catch (const WorkerLost& e) {
      if (++recoveries_in_a_row_ > opt_.max_recoveries) {
        fail_all(std::string("workers keep failing: ") + e.what());
        recoveries_in_a_row_ = 0;
      }
      // Recovery empties every worker: no placement survives it.
      placed_.clear();
      to_release_.clear();
      try {
        pipeline_.recover();
        scheduler_.reset_worker_state();
      } catch (const std::exception& r) {
        fail_all(std::string("worker recovery failed: ") + r.what());
        scheduler_.reset_worker_state();
      }
    } catch (const std::exception& e) {
      // A rejected step leaves its sequences inconsistent on the workers: fail them.
      fail_all(std::string("step failed: ") + e.what());
      scheduler_.reset_worker_state();
    }
    update_health();
  }
  take_inbox();  // requests that raced with stop() are cancelled too
  fail_all("the server is shutting down", FinishReason::kCancelled);
}

}  // namespace ds
