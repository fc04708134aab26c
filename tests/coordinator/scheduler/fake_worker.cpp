#include "tests/coordinator/scheduler/fake_worker.h"

#include <algorithm>
#include <numeric>

namespace ds::test {

int32_t fake_model_token(std::span<const int32_t> history, uint32_t vocab) {
  uint64_t h = 1469598103934665603ULL;
  for (int32_t t : history) h = (h ^ static_cast<uint32_t>(t)) * 1099511628211ULL;
  h ^= h >> 29;
  return static_cast<int32_t>(h % vocab);
}

FakeWorker::FakeWorker(const SchedulerConfig& config, uint32_t vocab)
    : block_size_(config.block_size),
      vocab_(vocab),
      stateless_(config.stateless),
      kv_(config.num_blocks, std::vector<int32_t>(config.block_size, -1)),
      state_(config.max_seqs),
      owner_(config.max_seqs),
      snapshots_(config.num_snapshots) {}

std::string FakeWorker::run(const StepPlan& plan, std::vector<int32_t>& sampled) {
  for (const ReleasedSeq& r : plan.released) {
    if (auto e = release(r); !e.empty()) return e;
  }
  for (const ScheduledSeq& row : plan.seqs) {
    if (auto e = setup(row); !e.empty()) return e;
  }
  sampled.assign(plan.seqs.size(), -1);
  accepted_.assign(plan.seqs.size(), 0);
  drafts_.assign(plan.seqs.size(), {});
  for (size_t i = 0; i < plan.seqs.size(); ++i) {
    const ScheduledSeq& row = plan.seqs[i];
    if (auto e = compute(row); !e.empty()) return e;
    if (row.needs_logits && (row.n_draft > 0 || row.spec_k > 0)) {
      if (auto e = speculate(row, i, sampled); !e.empty()) return e;
    } else if (row.needs_logits) {
      sampled[i] = fake_model_token(state_[row.state_slot], vocab_);
    }
  }
  for (const ScheduledSeq& row : plan.seqs) {
    if (row.save_snapshot) snapshots_.at(*row.save_snapshot) = state_[row.state_slot];
  }
  return {};
}

std::string FakeWorker::release(const ReleasedSeq& r) {
  if (owner_.at(r.state_slot) != r.request_id) return "release of a slot not owned: " + r.request_id;
  owner_[r.state_slot].clear();
  tables_.erase(r.request_id);
  return {};
}

std::string FakeWorker::setup(const ScheduledSeq& row) {
  if (!row.is_new) {
    if (owner_.at(row.state_slot) != row.request_id) return "slot not owned by " + row.request_id;
    auto& table = tables_.at(row.request_id);
    table.insert(table.end(), row.block_ids.begin(), row.block_ids.end());
    return {};
  }
  if (tables_.count(row.request_id) != 0) return "new sequence already known: " + row.request_id;
  if (!owner_.at(row.state_slot).empty()) return "slot reused before release: " + row.request_id;
  owner_[row.state_slot] = row.request_id;
  tables_[row.request_id] = row.block_ids;
  state_[row.state_slot].clear();
  if (row.load_snapshot) {
    const auto& snap = snapshots_.at(*row.load_snapshot);
    if (!snap) return "load of a snapshot never saved";
    state_[row.state_slot] = *snap;
  } else if (stateless_) {
    // No recurrent state: the history is what the shared KV blocks hold before start_pos.
    for (uint32_t p = 0; p < row.start_pos; ++p) {
      if (p / block_size_ >= row.block_ids.size()) return "no block for cached position of " + row.request_id;
      const std::vector<int32_t>& block = kv_.at(row.block_ids[p / block_size_]);
      if (block[p % block_size_] < 0) return "cached position never written for " + row.request_id;
      state_[row.state_slot].push_back(block[p % block_size_]);
    }
  }
  return {};
}

// Greedy verification of a row [y, d1..dk] whose tokens are already in the state, then the
// next drafts. Rejected positions stay in the state and KV until the next row rewinds.
std::string FakeWorker::speculate(const ScheduledSeq& row, size_t i, std::vector<int32_t>& sampled) {
  const auto& state = state_[row.state_slot];
  const size_t first = row.start_pos + row.token_ids.size() - row.n_draft;  // end of the row's history before d1
  std::vector<int32_t> history(state.begin(), state.begin() + static_cast<std::ptrdiff_t>(first));
  uint32_t n = 0;
  int32_t next = fake_model_token(history, vocab_);
  while (n < row.n_draft && state[first + n] == next) {
    history.push_back(next);
    next = fake_model_token(history, vocab_);
    ++n;
  }
  accepted_[i] = n;
  sampled[i] = next;
  // The MTP draft rows run at positions end .. end + spec_k - 1 (all accepted: end = row end).
  const size_t reach = row.start_pos + row.token_ids.size() + row.spec_k;
  if (row.spec_k > 0 && (reach - 1) / block_size_ >= tables_.at(row.request_id).size()) {
    return "no block for the draft rows of " + row.request_id;
  }
  if (max_context > 0 && reach > max_context) return "draft rows of " + row.request_id + " pass the context";
  history.push_back(next);
  for (uint32_t j = 0; j < row.spec_k; ++j) {
    int32_t d = fake_model_token(history, vocab_);
    draft_rng_ = draft_rng_ * 6364136223846793005ULL + 1442695040888963407ULL;
    if ((draft_rng_ >> 62) == 0) d = static_cast<int32_t>((static_cast<uint32_t>(d) + 1) % vocab_);
    drafts_[i].push_back(d);
    history.push_back(d);
  }
  return {};
}

std::string FakeWorker::compute(const ScheduledSeq& row) {
  auto& state = state_[row.state_slot];
  const auto& table = tables_.at(row.request_id);
  if (row.token_ids.empty()) return "empty row for " + row.request_id;
  if (row.n_draft >= row.token_ids.size() || row.n_draft > kMaxSpecK) return "bad draft count for " + row.request_id;
  if (row.rewind) {  // the workers keep one state per verify row: at most kMaxSpecK back
    if (row.is_new || state.size() <= row.start_pos || state.size() > row.start_pos + kMaxSpecK) {
      return "rewind of " + row.request_id + " to a position not captured";
    }
    state.resize(row.start_pos);
  }
  if (state.size() != row.start_pos) return "state of " + row.request_id + " not at start_pos";
  for (uint32_t q = 0; q < row.start_pos; ++q) {  // what attention would read
    if (q / block_size_ >= table.size()) return "block table too short for " + row.request_id;
    if (kv_[table[q / block_size_]][q % block_size_] != state[q]) {
      return "KV of " + row.request_id + " wrong at position " + std::to_string(q);
    }
  }
  for (size_t i = 0; i < row.token_ids.size(); ++i) {
    uint32_t p = row.start_pos + static_cast<uint32_t>(i);
    if (p / block_size_ >= table.size()) return "no block for position " + std::to_string(p);
    kv_[table[p / block_size_]][p % block_size_] = row.token_ids[i];
    state.push_back(row.token_ids[i]);
  }
  computed_tokens_ += row.token_ids.size();
  return {};
}

Harness::Harness(const SchedulerConfig& config, uint32_t vocab) : sched(config), worker(config, vocab) {
  worker.max_context = config.max_context;
}

void Harness::add(const std::string& id, std::vector<int32_t> prompt, uint32_t max_tokens, bool ignore_eos) {
  GenerationRequest r;
  r.request_id = id;
  r.prompt_ids = std::move(prompt);
  r.sampling.max_tokens = max_tokens;
  r.sampling.ignore_eos = ignore_eos;
  sched.add_request(r);
}

// Plans one step and runs it on the worker; `submitted` false when the plan was empty (its
// releases still reach the worker).
std::string Harness::submit(bool& submitted) {
  StepPlan plan = sched.schedule();
  if (auto e = sched.check_invariants(); !e.empty()) return "after schedule: " + e;
  std::vector<int32_t> sampled;
  if (auto e = worker.run(plan, sampled); !e.empty()) return e;
  submitted = !plan.empty();
  last_plan = plan;
  if (!submitted) return {};
  for (size_t i = 0; i < sampled.size(); ++i) {
    if (sampler && plan.seqs[i].needs_logits) sampled[i] = sampler(plan.seqs[i], sampled[i]);
  }
  Flying f{std::move(plan), SampledStep{last_plan.step_id, sampled, {}, {}}, false};
  if (sched.config().spec_k > 0) {
    f.out.accepted = worker.accepted();
    f.out.drafts = worker.drafts();
  }
  flying_.push_back(std::move(f));
  most_in_flight = std::max(most_in_flight, static_cast<uint32_t>(sched.steps_in_flight()));
  return {};
}

std::string Harness::apply(const Flying& f) {
  UpdateResult result = sched.update_from_output(f.out);
  for (const TokenEvent& t : result.tokens) outputs[t.request_id].push_back(t.token);
  for (const FinishEvent& e : result.finished) finished[e.request_id] = e;
  if (auto e = sched.check_invariants(); !e.empty()) return "after update: " + e;
  return {};
}

std::string Harness::step() {
  const uint32_t depth = std::max<uint32_t>(sched.config().max_steps_in_flight, 1);
  while (flying_.size() < depth) {
    bool submitted = false;
    if (auto e = submit(submitted); !e.empty()) return e;
    if (!submitted) break;
    Flying& f = flying_.back();
    const bool samples =
        std::any_of(f.plan.seqs.begin(), f.plan.seqs.end(), [](const ScheduledSeq& s) { return s.needs_logits; });
    if (depth > 1 && !samples) {
      if (auto e = apply(f); !e.empty()) return e;
      f.applied = true;
    }
  }
  if (flying_.empty()) return {};
  Flying oldest = std::move(flying_.front());
  flying_.pop_front();
  return oldest.applied ? std::string() : apply(oldest);
}

std::string Harness::run_to_completion(int max_steps) {
  for (int i = 0; i < max_steps && (sched.has_unfinished() || !flying_.empty()); ++i) {
    if (auto e = step(); !e.empty()) return e;
  }
  return sched.has_unfinished() ? "requests left after max_steps" : "";
}

std::vector<int32_t> iota_tokens(uint32_t n, int32_t first) {
  std::vector<int32_t> v(n);
  std::iota(v.begin(), v.end(), first);
  return v;
}

}  // namespace ds::test
