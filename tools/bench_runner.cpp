#include "tools/bench_runner.h"

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <string>

#include "coordinator/engine/engine.h"
#include "worker/stage_model.h"

namespace ds::bench {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// One prefill chunk: [begin, end) of the prompt.
struct Chunk {
  size_t begin = 0;
  size_t end = 0;
  bool last = false;
};

std::vector<Chunk> chunks_of(size_t n, size_t batch) {
  if (batch == 0) batch = n;
  std::vector<Chunk> out;
  for (size_t b = 0; b < n; b += batch) out.push_back({b, std::min(n, b + batch), b + batch >= n});
  return out;
}

std::vector<int32_t> slice(const std::vector<int32_t>& ids, const Chunk& c) {
  return {ids.begin() + static_cast<std::ptrdiff_t>(c.begin), ids.begin() + static_cast<std::ptrdiff_t>(c.end)};
}

// Greedy decoding of `n` tokens, one per step, from token 1: `step(i, tok)` runs step i on
// `tok` and returns the token it chose. Both runners time their decode this way.
template <typename Step>
RunStats timed_decode(size_t n, Step step) {
  RunStats r;
  int32_t tok = 1;
  const auto t0 = Clock::now();
  for (size_t i = 0; i < n; ++i) {
    tok = step(i, tok);
    ++r.tokens;
    ++r.steps;
  }
  r.seconds = seconds_since(t0);
  return r;
}

// Greedy batched decoding: step i feeds `toks` (one token per sequence, all starting at 1)
// and `step(i, toks)` replaces them with that step's picks; each step counts one token per sequence.
template <typename Step>
RunStats timed_batch_decode(size_t n_seqs, size_t n, Step step) {
  RunStats r;
  std::vector<int32_t> toks(n_seqs, 1);
  const auto t0 = Clock::now();
  for (size_t i = 0; i < n; ++i) {
    step(i, toks);
    r.tokens += n_seqs;
    ++r.steps;
  }
  r.seconds = seconds_since(t0);
  return r;
}

// Each sequence's greedy pick from a batched step's output: its device digest, or the argmax
// of its downloaded logits row.
void pick_greedy(const StepOutput& out, size_t n_vocab, std::vector<int32_t>& toks) {
  if (out.digests.size() == toks.size()) {
    for (size_t s = 0; s < toks.size(); ++s) toks[s] = out.digests[s].token;
    return;
  }
  if (out.logits.size() != toks.size() * n_vocab) {
    throw std::runtime_error("batched decode step returned " + std::to_string(out.logits.size()) + " logits for " +
                             std::to_string(toks.size()) + " rows");
  }
  for (size_t s = 0; s < toks.size(); ++s) {
    const auto row = out.logits.begin() + static_cast<std::ptrdiff_t>(s * n_vocab);
    toks[s] = static_cast<int32_t>(std::max_element(row, row + static_cast<std::ptrdiff_t>(n_vocab)) - row);
  }
}

class StageRunner final : public BenchRunner {
 public:
  StageRunner(StageModel& model, size_t n_vocab) : model_(model), n_vocab_(n_vocab) {}

  RunStats prefill(uint64_t seq, const std::vector<int32_t>& ids, size_t batch) override {
    RunStats r;
    const auto t0 = Clock::now();
    for (const Chunk& c : chunks_of(ids.size(), batch)) {
      StepInput in;
      SeqStep s{seq, static_cast<uint32_t>(c.begin), slice(ids, c), {}};
      if (c.last) s.logit_rows.push_back(static_cast<uint32_t>(c.end - c.begin - 1));
      r.tokens += s.token_ids.size();
      in.seqs.push_back(std::move(s));
      StepOutput out;
      model_.forward(in, &out);
      ++r.steps;
    }
    r.seconds = seconds_since(t0);
    return r;
  }

  RunStats decode(uint64_t seq, uint32_t start, size_t n) override {
    return timed_decode(n, [&](size_t i, int32_t tok) -> int32_t {
      StepInput in;
      in.seqs.push_back({seq, static_cast<uint32_t>(start + i), {tok}, {0}});
      in.digest_rows.push_back({});  // greedy, like the server: a device digest where the backend has one
      StepOutput out;
      model_.forward(in, &out);
      if (!out.digests.empty()) return out.digests[0].token;
      const auto row_end = out.logits.begin() + static_cast<std::ptrdiff_t>(n_vocab_);
      return static_cast<int32_t>(std::max_element(out.logits.begin(), row_end) - out.logits.begin());
    });
  }

  RunStats decode_batch(const std::vector<uint64_t>& seqs, uint32_t start, size_t n) override {
    return timed_batch_decode(seqs.size(), n, [&](size_t i, std::vector<int32_t>& toks) {
      StepInput in;
      for (size_t s = 0; s < seqs.size(); ++s) {
        in.seqs.push_back({seqs[s], static_cast<uint32_t>(start + i), {toks[s]}, {0}});
        in.digest_rows.push_back({});  // one per logit row, as the server's batched step asks
      }
      StepOutput out;
      model_.forward(in, &out);
      pick_greedy(out, n_vocab_, toks);
    });
  }

  void drop(uint64_t seq) override { model_.drop_sequence(seq); }

 private:
  StageModel& model_;
  size_t n_vocab_;
};

// Adds a step's per-stage compute times (as the workers measured them) to r.stage_compute_s.
void add_stage_compute(const StepOutcome& out, RunStats* r) {
  for (const StageTime& t : out.timings) {
    if (r->stage_compute_s.size() <= t.rank) r->stage_compute_s.resize(t.rank + 1, 0.0);
    r->stage_compute_s[t.rank] += static_cast<double>(t.compute_us) * 1e-6;
  }
}

class PipelineRunner final : public BenchRunner {
 public:
  PipelineRunner(const EngineOptions& options, uint32_t pipeline_depth, uint32_t decode_groups)
      : engine_(options),
        // 0: enough plans to keep every stage busy, within the workers' 4 ring slots (serve's
        // --pipeline-depth default).
        window_(pipeline_depth != 0 ? pipeline_depth : std::min<uint32_t>(options.n_workers + 1, 4)),
        groups_(std::max<uint32_t>(decode_groups, 1)) {
    engine_.start();
  }
  ~PipelineRunner() override { engine_.shutdown(); }

  // The chunks go out pipelined, up to the window in flight (submit/collect): stage k computes
  // chunk i+1 while stage k+1 computes chunk i; the results equal sequential steps bit for bit.
  RunStats prefill(uint64_t seq, const std::vector<int32_t>& ids, size_t batch) override {
    RunStats r;
    const auto t0 = Clock::now();
    std::vector<std::vector<SeqRequest>> steps;
    for (const Chunk& c : chunks_of(ids.size(), batch)) {
      SeqRequest q;
      q.seq_id = seq;
      q.start_pos = static_cast<uint32_t>(c.begin);
      q.tokens = slice(ids, c);
      if (c.last) q.logit_rows.push_back(static_cast<uint32_t>(c.end - c.begin - 1));
      q.random_u.assign(q.logit_rows.size(), 0.0);
      r.tokens += q.tokens.size();
      steps.push_back({std::move(q)});
    }
    size_t sent = 0;
    for (size_t done = 0; done < steps.size(); ++done) {
      for (; sent < steps.size() && sent - done < window_; ++sent) engine_.submit(steps[sent]);
      add_stage_compute(engine_.collect(), &r);
    }
    r.seconds = seconds_since(t0);
    r.steps = steps.size();
    return r;
  }

  RunStats decode(uint64_t seq, uint32_t start, size_t n) override {
    RunStats compute;
    RunStats r = timed_decode(n, [&](size_t i, int32_t tok) -> int32_t {
      SeqRequest q;
      q.seq_id = seq;
      q.start_pos = static_cast<uint32_t>(start + i);
      q.tokens = {tok};
      q.logit_rows = {0};
      q.random_u = {0.0};  // greedy (the default SamplingRule): u is not used
      const StepOutcome out = engine_.step({q});
      if (out.rows.size() != 1)
        throw std::runtime_error("pipeline returned " + std::to_string(out.rows.size()) + " rows for 1");
      add_stage_compute(out, &compute);
      return out.rows[0].token;
    });
    r.stage_compute_s = std::move(compute.stage_compute_s);
    return r;
  }

  // Per step one SeqRequest per sequence; the rows come back in request order. With decode
  // groups each group is its own step and every group's step is in flight at once.
  RunStats decode_batch(const std::vector<uint64_t>& seqs, uint32_t start, size_t n) override {
    RunStats compute;
    const std::vector<std::pair<size_t, size_t>> groups = group_ranges(seqs.size());
    RunStats r = timed_batch_decode(seqs.size(), n, [&](size_t i, std::vector<int32_t>& toks) {
      // Round i: the first round submits every group; later rounds find each group's step i
      // already in flight (sent when its step i - 1 came back).
      if (i == 0) {
        for (const auto& g : groups) engine_.submit(group_step(seqs, toks, g, start));
      }
      for (const auto& g : groups) {
        const StepOutcome out = engine_.collect();
        if (out.rows.size() != g.second - g.first) {
          throw std::runtime_error("pipeline returned " + std::to_string(out.rows.size()) + " rows for " +
                                   std::to_string(g.second - g.first));
        }
        for (size_t s = g.first; s < g.second; ++s) toks[s] = out.rows[s - g.first].token;
        add_stage_compute(out, &compute);
        if (i + 1 < n) engine_.submit(group_step(seqs, toks, g, start + static_cast<uint32_t>(i) + 1));
      }
    });
    r.stage_compute_s = std::move(compute.stage_compute_s);
    return r;
  }

  void drop(uint64_t seq) override { engine_.drop_sequences({seq}); }

 private:
  // [first, last) of each decode group: contiguous, sizes differing by at most one.
  std::vector<std::pair<size_t, size_t>> group_ranges(size_t n_seqs) const {
    const size_t g = std::min<size_t>(groups_, std::max<size_t>(n_seqs, 1));
    std::vector<std::pair<size_t, size_t>> out;
    for (size_t k = 0; k < g; ++k) out.emplace_back(n_seqs * k / g, n_seqs * (k + 1) / g);
    return out;
  }

  // One greedy decode step of the group's sequences at position `pos`.
  static std::vector<SeqRequest> group_step(const std::vector<uint64_t>& seqs, const std::vector<int32_t>& toks,
                                            const std::pair<size_t, size_t>& group, uint32_t pos) {
    std::vector<SeqRequest> qs;
    for (size_t s = group.first; s < group.second; ++s) {
      SeqRequest q;
      q.seq_id = seqs[s];
      q.start_pos = pos;
      q.tokens = {toks[s]};
      q.logit_rows = {0};
      q.random_u = {0.0};  // greedy
      qs.push_back(std::move(q));
    }
    return qs;
  }

  PipelineEngine engine_;
  uint32_t window_;  // prefill chunks in flight at once
  uint32_t groups_;
};

}  // namespace

std::unique_ptr<BenchRunner> make_stage_runner(StageModel& model, size_t n_vocab) {
  return std::make_unique<StageRunner>(model, n_vocab);
}

std::unique_ptr<BenchRunner> make_pipeline_runner(const EngineOptions& options, uint32_t pipeline_depth,
                                                  uint32_t decode_groups) {
  return std::make_unique<PipelineRunner>(options, pipeline_depth, decode_groups);
}

}  // namespace ds::bench
