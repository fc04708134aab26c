// Crash-surviving greedy generation (see greedy_generate.h).
#include "tests/testutil/greedy_generate.h"

#include <algorithm>
#include <iostream>

#include "common/log.h"

namespace ds {
namespace {

// tokens[start, end) of the sequence as one step's request, with logits for the last token.
SeqRequest chunk_request(uint64_t seq_id, const std::vector<int32_t>& tokens, size_t start, size_t end) {
  SeqRequest r;
  r.seq_id = seq_id;
  r.start_pos = static_cast<uint32_t>(start);
  r.tokens.assign(tokens.begin() + static_cast<std::ptrdiff_t>(start),
                  tokens.begin() + static_cast<std::ptrdiff_t>(end));
  r.logit_rows = {static_cast<uint32_t>(end - start - 1)};
  r.random_u = {0.0};
  return r;
}

// Runs tokens[start, end) of the sequence; returns the greedy token after the last one.
int32_t run_chunk(PipelineEngine& engine, uint64_t seq_id, const std::vector<int32_t>& tokens, size_t start,
                  size_t end) {
  return engine.step({chunk_request(seq_id, tokens, start, end)}).rows.at(0).token;
}

// The whole prompt in chunks of `chunk` tokens, up to min(stages + 1, 4) in flight at once
// (stage k works on chunk i+1 while stage k+1 works on chunk i). Fills `ends` with the chunk
// boundaries; returns the greedy token after the prompt.
int32_t prefill_pipelined(PipelineEngine& engine, const GreedyOptions& options, const std::vector<int32_t>& prompt,
                          std::vector<size_t>* ends) {
  ends->clear();
  std::vector<SeqRequest> steps;
  for (size_t start = 0; start < prompt.size(); start += options.prefill_chunk) {
    const size_t end = std::min(prompt.size(), start + options.prefill_chunk);
    SeqRequest r = chunk_request(options.seq_id, prompt, start, end);
    if (end < prompt.size()) {  // only the last chunk samples
      r.logit_rows.clear();
      r.random_u.clear();
    }
    steps.push_back(std::move(r));
    ends->push_back(end);
  }
  const size_t window = std::min<size_t>(engine.layout().size() + 1, 4);
  size_t sent = 0;
  StepOutcome last;
  for (size_t done = 0; done < steps.size(); ++done) {
    for (; sent < steps.size() && sent - done < window; ++sent) engine.submit({steps[sent]});
    last = engine.collect();
    if (done + 1 < ends->size() && options.on_prefill) options.on_prefill((*ends)[done]);
  }
  return last.rows.at(0).token;
}

}  // namespace

std::vector<int32_t> generate_greedy(PipelineEngine& engine, const std::vector<int32_t>& prompt, uint32_t n_tokens,
                                     const GreedyOptions& options) {
  std::vector<int32_t> tokens = prompt;
  std::vector<size_t> bounds;  // end of every step executed so far (the replay schedule)
  size_t done_end = 0;         // tokens whose state the workers hold
  size_t replay_idx = 0;       // next bound to replay; == bounds.size() when not replaying
  uint32_t recoveries = 0;
  while (tokens.size() - prompt.size() < n_tokens) {
    try {
      if (replay_idx < bounds.size()) {
        run_chunk(engine, options.seq_id, tokens, done_end, bounds[replay_idx]);
        done_end = bounds[replay_idx++];
        continue;
      }
      if (options.pipeline_prefill && options.prefill_chunk != 0 && bounds.empty() && !prompt.empty()) {
        std::vector<size_t> ends;
        const int32_t next = prefill_pipelined(engine, options, prompt, &ends);
        bounds = ends;  // replayed one step at a time after a later crash: the same computation
        done_end = prompt.size();
        replay_idx = bounds.size();
        tokens.push_back(next);
        if (options.on_token) options.on_token(1);
        continue;
      }
      if (options.prefill_chunk != 0 && done_end + options.prefill_chunk < prompt.size()) {
        const size_t end = done_end + options.prefill_chunk;  // leaves prompt tokens for later steps
        run_chunk(engine, options.seq_id, tokens, done_end, end);
        done_end = end;
        bounds.push_back(done_end);
        replay_idx = bounds.size();
        if (options.on_prefill) options.on_prefill(done_end);
        continue;
      }
      const int32_t next = run_chunk(engine, options.seq_id, tokens, done_end, tokens.size());
      done_end = tokens.size();
      bounds.push_back(done_end);
      replay_idx = bounds.size();
      tokens.push_back(next);
      if (options.on_token) options.on_token(static_cast<uint32_t>(tokens.size() - prompt.size()));
    } catch (const WorkerLost& e) {
      if (++recoveries > options.max_recoveries) throw;
      ds::log::warn("generate", ds::log::Msg()
                                    << e.what() << "; recovering and re-prefilling " << done_end << " tokens");
      engine.recover();
      done_end = 0;
      replay_idx = 0;
    }
  }
  engine.drop_sequences({options.seq_id});
  return {tokens.begin() + static_cast<std::ptrdiff_t>(prompt.size()), tokens.end()};
}

}  // namespace ds
