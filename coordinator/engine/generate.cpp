// Crash-surviving greedy generation (see generate.h).
#include "coordinator/engine/generate.h"
#include "common/log.h"

#include <iostream>

namespace ds {
namespace {

// Runs tokens[start, end) of the sequence; returns the greedy token after the last one.
int32_t run_chunk(PipelineEngine& engine, uint64_t seq_id, const std::vector<int32_t>& tokens, size_t start, size_t end) {
  SeqRequest r;
  r.seq_id = seq_id;
  r.start_pos = static_cast<uint32_t>(start);
  r.tokens.assign(tokens.begin() + static_cast<std::ptrdiff_t>(start), tokens.begin() + static_cast<std::ptrdiff_t>(end));
  r.logit_rows = {static_cast<uint32_t>(end - start - 1)};
  r.random_u = {0.0};
  return engine.step({r}).rows.at(0).token;
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
      const int32_t next = run_chunk(engine, options.seq_id, tokens, done_end, tokens.size());
      done_end = tokens.size();
      bounds.push_back(done_end);
      replay_idx = bounds.size();
      tokens.push_back(next);
      if (options.on_token) options.on_token(static_cast<uint32_t>(tokens.size() - prompt.size()));
    } catch (const WorkerLost& e) {
      if (++recoveries > options.max_recoveries) throw;
      ds::log::warn("generate", ds::log::Msg() << e.what() << "; recovering and re-prefilling " << done_end << " tokens");
      engine.recover();
      done_end = 0;
      replay_idx = 0;
    }
  }
  engine.drop_sequences({options.seq_id});
  return {tokens.begin() + static_cast<std::ptrdiff_t>(prompt.size()), tokens.end()};
}

}  // namespace ds
