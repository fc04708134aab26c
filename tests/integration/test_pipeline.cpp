// The multi-process pipeline on the fixture model: logits through 1, 2 and 3 worker processes
// equal the in-process forward bit for bit; hidden states through the shared-memory ring and
// inline give identical results; greedy generation survives a SIGKILLed worker (mid-decode and
// mid-prefill, through the ring) with exactly the tokens of an uninterrupted run; a stopped
// worker is noticed within 2 s.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstring>

#include "common/ipc/endpoints.h"
#include "common/ipc/shm_ring.h"
#include "tests/integration/engine_test_util.h"
#include "tests/testutil/greedy_generate.h"

namespace ds {
namespace {

struct Chunk {
  size_t begin, end;
  std::vector<uint32_t> rows;  // logit rows within the chunk
};

// Full-logit rows of a prompt run as `chunks`, in process.
std::vector<std::vector<float>> reference_logits(const std::vector<int32_t>& prompt, const std::vector<Chunk>& chunks) {
  test::InProcessModel model;
  std::vector<std::vector<float>> rows;
  for (const Chunk& c : chunks) {
    StepInput in;
    in.seqs.push_back(SeqStep{
        1, static_cast<uint32_t>(c.begin),
        std::vector<int32_t>(prompt.begin() + static_cast<long>(c.begin), prompt.begin() + static_cast<long>(c.end)),
        c.rows});
    StepOutput out;
    model.stage->forward(in, &out);
    const size_t v = model.config.n_vocab;
    for (size_t r = 0; r < c.rows.size(); ++r)
      rows.emplace_back(out.logits.begin() + static_cast<long>(r * v),
                        out.logits.begin() + static_cast<long>((r + 1) * v));
  }
  return rows;
}

std::vector<std::vector<float>> pipeline_logits(PipelineEngine& engine, uint64_t seq,
                                                const std::vector<int32_t>& prompt, const std::vector<Chunk>& chunks) {
  std::vector<std::vector<float>> rows;
  for (const Chunk& c : chunks) {
    SeqRequest r;
    r.seq_id = seq;
    r.start_pos = static_cast<uint32_t>(c.begin);
    r.tokens.assign(prompt.begin() + static_cast<long>(c.begin), prompt.begin() + static_cast<long>(c.end));
    r.logit_rows = c.rows;
    r.return_full_logits = true;
    StepOutcome out = engine.step({r});
    for (RowResult& row : out.rows) {
      EXPECT_EQ(row.token, argmax_token(row.logits.data(), row.logits.size()));
      rows.push_back(std::move(row.logits));
    }
  }
  engine.drop_sequences({seq});
  return rows;
}

void expect_bit_equal(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].size(), b[i].size());
    EXPECT_EQ(std::memcmp(a[i].data(), b[i].data(), a[i].size() * sizeof(float)), 0) << "logit row " << i << " differs";
  }
}

// Whether the name of the shared-memory ring feeding stage `rank` exists now.
bool ring_exists(const std::string& control_endpoint, uint32_t rank) {
  try {
    ipc::ShmRingConsumer ring(ipc::shm_ring_name(ipc::data_endpoints(control_endpoint, rank, "").connect));
    return true;
  } catch (const ipc::ShmRingError&) {
    return false;
  }
}

// How many stages read their input of a fresh one-step sequence from a shared-memory ring.
size_t stages_fed_by_shm(PipelineEngine& engine, uint64_t seq = 999) {
  SeqRequest r;
  r.seq_id = seq;
  r.tokens = {1, 2, 3};
  r.logit_rows = {2};
  r.random_u = {0.0};
  const StepOutcome out = engine.step({r});
  engine.drop_sequences({seq});
  size_t n = 0;
  for (const StageTime& t : out.timings) n += t.input_from_shm ? 1 : 0;
  return n;
}

TEST(Pipeline, LogitsBitExactThrough1To3Workers) {
  const std::vector<int32_t> chat = test::chat_prompt();
  std::vector<Chunk> chat_chunks{{0, chat.size(), {}}};
  for (uint32_t r = 0; r < chat.size(); ++r) chat_chunks[0].rows.push_back(r);
  const std::vector<int32_t> rand = test::random_prompt(200, 151936);
  // Two chunks: state is carried across steps inside the workers.
  const std::vector<Chunk> rand_chunks{{0, 150, {0, 37, 149}}, {150, 200, {0, 7, 21, 35, 49}}};
  const auto ref_chat = reference_logits(chat, chat_chunks);
  const auto ref_rand = reference_logits(rand, rand_chunks);
  for (uint32_t n : {1u, 2u, 3u}) {
    SCOPED_TRACE("workers=" + std::to_string(n));
    PipelineEngine engine(test::engine_options(n));
    engine.start();
    ASSERT_EQ(engine.layout().size(), n);
    expect_bit_equal(pipeline_logits(engine, 1, chat, chat_chunks), ref_chat);
    expect_bit_equal(pipeline_logits(engine, 2, rand, rand_chunks), ref_rand);
  }
}

TEST(Pipeline, TcpTransportSameLogits) {
  const std::vector<int32_t> chat = test::chat_prompt();
  const std::vector<Chunk> chunks{{0, chat.size(), {0, 18}}};
  EngineOptions options = test::engine_options(2);
  options.control_endpoint = "tcp://127.0.0.1:" + std::to_string(20000 + getpid() % 20000);
  options.worker_extra_args = {"--hostname", "127.0.0.1"};
  PipelineEngine engine(options);
  engine.start();
  expect_bit_equal(pipeline_logits(engine, 1, chat, chunks), reference_logits(chat, chunks));
  EXPECT_EQ(stages_fed_by_shm(engine), 0u) << "tcp:// keeps the inline path";
}

// Same-host stages pass hidden states through a shared-memory ring; forced inline they travel
// in the ZeroMQ message. Both equal the in-process logits bit for bit and give the same greedy
// tokens for prompt lengths from 1 to 300, prefilled whole or in chunks.
TEST(Pipeline, ShmRingAndInlineTransportsGiveIdenticalResults) {
  const std::vector<int32_t> rand = test::random_prompt(300, 151936, 7);
  const std::vector<Chunk> chunks{{0, 130, {0, 129}}, {130, 131, {0}}, {131, 300, {0, 100, 168}}};
  const auto ref = reference_logits(rand, chunks);
  std::vector<std::vector<int32_t>> tokens[2];
  for (int t = 0; t < 2; ++t) {
    const bool ring = t == 0;
    SCOPED_TRACE(ring ? "ring" : "inline");
    EngineOptions options = test::engine_options(3);
    options.hidden_transport = ring ? "auto" : "inline";
    PipelineEngine engine(options);
    engine.start();
    expect_bit_equal(pipeline_logits(engine, 1, rand, chunks), ref);
    uint64_t seq = 10;
    for (size_t len : {1u, 2u, 17u, 64u, 300u}) {
      const std::vector<int32_t> prompt(rand.begin(), rand.begin() + static_cast<long>(len));
      for (uint32_t chunk : {0u, 16u}) {
        GreedyOptions g;
        g.seq_id = ++seq;
        g.prefill_chunk = chunk;
        tokens[t].push_back(generate_greedy(engine, prompt, 6, g));
      }
    }
    EXPECT_EQ(stages_fed_by_shm(engine), ring ? 2u : 0u);
    // The consumer unlinks a ring's name once mapped: nothing to leak even if both get killed.
    EXPECT_FALSE(ring_exists(engine.control_endpoint(), 1));
    EXPECT_FALSE(ring_exists(engine.control_endpoint(), 2));
  }
  EXPECT_EQ(tokens[0], tokens[1]);
  for (size_t i = 0; i + 1 < tokens[0].size(); i += 2) EXPECT_EQ(tokens[0][i], tokens[0][i + 1]) << "chunked prefill";
}

// Where a test kills a worker: its rank, once that many prompt tokens are prefilled.
struct PrefillKill {
  uint32_t victim = 0;
  size_t at_prefilled = 0;
};

// Greedy generation of `n` tokens with `options`, the `kill_point` worker SIGKILLed mid-prefill: the
// tokens must equal `expected` (an uninterrupted run) and the engine must have restarted it.
void expect_greedy_survives_kill(PipelineEngine& engine, const std::vector<int32_t>& prompt, size_t n,
                                 GreedyOptions options, PrefillKill kill_point, const std::vector<int32_t>& expected) {
  const std::vector<WorkerInfo> before = engine.workers();
  const uint32_t victim = kill_point.victim;
  bool killed = false;
  options.on_prefill = [&](size_t prefilled) {
    if (prefilled == kill_point.at_prefilled && !killed) {
      killed = true;
      ASSERT_EQ(kill(static_cast<pid_t>(before[victim].pid), SIGKILL), 0);
    }
  };
  EXPECT_EQ(generate_greedy(engine, prompt, n, options), expected);
  EXPECT_TRUE(killed);
  EXPECT_NE(engine.workers()[victim].pid, before[victim].pid);
}

// A worker SIGKILLed between the chunks of a long prefill (each rank in turn: the first only
// writes a ring, the middle one reads one and writes another, the last only reads): recovery
// re-prefills and the tokens equal an uninterrupted run.
TEST(Pipeline, GreedySurvivesSigkillMidPrefillThroughTheRing) {
  PipelineEngine engine(test::engine_options(3));
  engine.start();
  const std::vector<int32_t> prompt = test::random_prompt(240, 151936, 11);
  GreedyOptions plain;
  plain.seq_id = 1;
  plain.prefill_chunk = 48;
  const std::vector<int32_t> expected = generate_greedy(engine, prompt, 12, plain);
  ASSERT_EQ(stages_fed_by_shm(engine), 2u);
  for (uint32_t victim = 0; victim < 3; ++victim) {
    SCOPED_TRACE("victim rank " + std::to_string(victim));
    GreedyOptions crashing = plain;
    crashing.seq_id = 2 + victim;
    expect_greedy_survives_kill(engine, prompt, 12, crashing, {victim, 96}, expected);
    EXPECT_EQ(stages_fed_by_shm(engine), 2u) << "fresh rings after the recovery";
  }
}

// Chunk `c` of `prompt` as sequence `seq`, with full logits of the chunk's rows.
SeqRequest chunk_request(uint64_t seq, const std::vector<int32_t>& prompt, const Chunk& c) {
  SeqRequest r;
  r.seq_id = seq;
  r.start_pos = static_cast<uint32_t>(c.begin);
  r.tokens.assign(prompt.begin() + static_cast<long>(c.begin), prompt.begin() + static_cast<long>(c.end));
  r.logit_rows = c.rows;
  r.random_u.assign(c.rows.size(), 0.0);
  r.return_full_logits = true;
  return r;
}

// Submits `steps` keeping up to `window` in flight and collects them in order (`released[i]`
// rides on step i); checks the window is kept.
std::vector<StepOutcome> run_windowed(PipelineEngine& engine, const std::vector<std::vector<SeqRequest>>& steps,
                                      size_t window, const std::vector<std::vector<uint64_t>>& released = {}) {
  std::vector<StepOutcome> outs;
  size_t sent = 0;
  while (outs.size() < steps.size()) {
    for (; sent < steps.size() && sent - outs.size() < window; ++sent) {
      engine.submit(steps[sent], sent < released.size() ? released[sent] : std::vector<uint64_t>{});
    }
    EXPECT_EQ(engine.in_flight(), sent - outs.size());
    outs.push_back(engine.collect());
  }
  return outs;
}

// Pipelined steps (three chunk plans in flight at once) give the full logits of sequential
// steps bit for bit, also with two sequences interleaved.
TEST(Pipeline, PipelinedStepsEqualSequentialLogits) {
  const std::vector<int32_t> rand = test::random_prompt(200, 151936);
  const std::vector<Chunk> chunks{{0, 64, {0, 63}}, {64, 65, {0}}, {65, 150, {84}}, {150, 200, {0, 7, 49}}};
  const auto ref = reference_logits(rand, chunks);
  PipelineEngine engine(test::engine_options(3));
  engine.start();
  std::vector<std::vector<SeqRequest>> steps;
  for (const Chunk& c : chunks) {
    for (uint64_t seq : {1u, 2u}) {
      steps.push_back({chunk_request(seq, rand, c)});  // seq 1 and seq 2 alternate, one per step
    }
  }
  const std::vector<StepOutcome> outs = run_windowed(engine, steps, 3);
  ASSERT_EQ(outs.size(), steps.size());
  EXPECT_EQ(engine.in_flight(), 0u);
  std::vector<std::vector<float>> got[2];
  for (size_t i = 0; i < outs.size(); ++i) {
    for (const RowResult& row : outs[i].rows) got[i % 2].push_back(row.logits);
  }
  expect_bit_equal(got[0], ref);
  expect_bit_equal(got[1], ref);
}

// submit() / collect() (BatchEngine's decode groups): six single-chunk steps of two sequences
// submitted before any is collected (more than the workers' 4 ring slots) come back in order
// with the sequential logits; the misuses are refused.
TEST(Pipeline, SubmittedStepsCollectInOrderWithSequentialLogits) {
  const std::vector<int32_t> rand = test::random_prompt(90, 151936);
  const std::vector<Chunk> chunks{{0, 30, {29}}, {30, 31, {0}}, {31, 90, {0, 58}}};
  const auto ref = reference_logits(rand, chunks);
  PipelineEngine engine(test::engine_options(2));
  engine.start();
  EXPECT_THROW(engine.collect(), std::logic_error) << "nothing in flight";
  for (const Chunk& c : chunks) {
    for (uint64_t seq : {1u, 2u}) {
      engine.submit({chunk_request(seq, rand, c)});
    }
  }
  EXPECT_EQ(engine.in_flight(), 6u);
  EXPECT_THROW(engine.step({}), std::logic_error) << "step() while steps are in flight";
  std::vector<std::vector<float>> got[2];
  for (size_t i = 0; i < 6; ++i) {
    StepOutcome out = engine.collect();
    ASSERT_EQ(out.rows.size(), chunks[i / 2].rows.size()) << "step " << i;
    for (const RowResult& row : out.rows) {
      EXPECT_EQ(row.seq_id, 1 + i % 2) << "results in submission order";
      got[i % 2].push_back(row.logits);
    }
  }
  EXPECT_EQ(engine.in_flight(), 0u);
  expect_bit_equal(got[0], ref);
  expect_bit_equal(got[1], ref);
}

// Releases ride on their own plan of a window of submitted steps (BatchEngine sends a preempted
// sequence's release with the plan made after it): with scheduler-placed memory, seq 1 prefills
// 0..64 in slot 0 over two plans; the third releases it and starts seq 2 in the same slot and
// block, so seq 2's logits are those of a fresh 8-token prompt. Released before the first plan
// instead, slot 0 would still be held by seq 1 at the third plan, which the workers refuse.
TEST(Pipeline, PipelinedReleasesApplyBeforeTheirOwnPlan) {
  const std::vector<int32_t> rand = test::random_prompt(64, 151936);
  const auto ref = reference_logits(rand, {{0, 8, {7}}});
  EngineOptions o = test::engine_options(2);
  o.cache.block_size = 16;
  o.cache.num_blocks = 8;
  o.cache.max_seqs = 2;
  PipelineEngine engine(o);
  engine.start();
  auto chunk = [&](uint64_t seq, size_t begin, size_t end, bool is_new, std::vector<uint32_t> blocks) {
    SeqRequest r;
    r.seq_id = seq;
    r.start_pos = static_cast<uint32_t>(begin);
    r.tokens.assign(rand.begin() + static_cast<long>(begin), rand.begin() + static_cast<long>(end));
    r.cache = SeqCache{};
    r.cache->state_slot = 0;
    r.cache->is_new = is_new;
    r.cache->block_ids = std::move(blocks);
    if (seq == 2) {
      r.logit_rows = {static_cast<uint32_t>(end - begin - 1)};
      r.random_u = {0.0};
      r.return_full_logits = true;
    }
    return std::vector<SeqRequest>{r};
  };
  const std::vector<StepOutcome> outs =
      run_windowed(engine, {chunk(1, 0, 32, true, {0, 1}), chunk(1, 32, 64, false, {2, 3}), chunk(2, 0, 8, true, {0})},
                   3, {{}, {}, {1}});
  ASSERT_EQ(outs.size(), 3u);
  ASSERT_EQ(outs[2].rows.size(), 1u);
  expect_bit_equal({outs[2].rows[0].logits}, ref);
}

// Issue 12's correctness bar: greedy tokens after a pipelined chunked prefill equal those after
// a sequential one, for every prompt length from 1 to 33 (chunks of 4: up to 9 of them, 4 in flight).
TEST(Pipeline, PipelinedPrefillGivesSequentialTokensForEveryPromptLength) {
  PipelineEngine engine(test::engine_options(3));
  engine.start();
  const std::vector<int32_t> rand = test::random_prompt(33, 151936, 3);
  uint64_t seq = 0;
  for (size_t len = 1; len <= rand.size(); ++len) {
    SCOPED_TRACE("prompt length " + std::to_string(len));
    const std::vector<int32_t> prompt(rand.begin(), rand.begin() + static_cast<long>(len));
    GreedyOptions sequential;
    sequential.seq_id = ++seq;
    sequential.prefill_chunk = 4;
    GreedyOptions pipelined = sequential;
    pipelined.seq_id = ++seq;
    pipelined.pipeline_prefill = true;
    EXPECT_EQ(generate_greedy(engine, prompt, 3, pipelined), generate_greedy(engine, prompt, 3, sequential));
  }
}

// A worker SIGKILLed while pipelined prefill chunks are in flight is recovered like any other
// crash: the tokens equal an uninterrupted run.
TEST(Pipeline, GreedySurvivesSigkillDuringPipelinedPrefill) {
  PipelineEngine engine(test::engine_options(3));
  engine.start();
  const std::vector<int32_t> prompt = test::random_prompt(240, 151936, 5);
  GreedyOptions plain;
  plain.seq_id = 1;
  plain.prefill_chunk = 24;
  plain.pipeline_prefill = true;
  const std::vector<int32_t> expected = generate_greedy(engine, prompt, 10, plain);
  GreedyOptions crashing = plain;
  crashing.seq_id = 2;
  // At 48 tokens chunk 2's result is in; later chunks are in flight.
  expect_greedy_survives_kill(engine, prompt, 10, crashing, {1, 48}, expected);
  EXPECT_EQ(stages_fed_by_shm(engine), 2u);
}

TEST(Pipeline, GreedySurvivesSigkilledWorker) {
  PipelineEngine engine(test::engine_options(3));
  engine.start();
  const std::vector<int32_t> prompt = test::chat_prompt();
  GreedyOptions plain;
  plain.seq_id = 1;
  const std::vector<int32_t> expected = generate_greedy(engine, prompt, 64, plain);
  ASSERT_EQ(expected.size(), 64u);
  // Hidden states between these same-host workers go through the shared-memory rings.
  ASSERT_EQ(stages_fed_by_shm(engine), 2u);

  const std::vector<WorkerInfo> before = engine.workers();
  GreedyOptions crashing;
  crashing.seq_id = 2;
  crashing.on_token = [&](uint32_t n) {
    if (n == 20) {
      ASSERT_EQ(kill(static_cast<pid_t>(before[1].pid), SIGKILL), 0);
    }
  };
  const std::vector<int32_t> got = generate_greedy(engine, prompt, 64, crashing);
  EXPECT_EQ(got, expected);
  const std::vector<WorkerInfo> after = engine.workers();
  EXPECT_EQ(after[0].pid, before[0].pid);
  EXPECT_EQ(after[2].pid, before[2].pid);
  EXPECT_NE(after[1].pid, before[1].pid);
  EXPECT_EQ(after[1].restarts, 1u);
  EXPECT_EQ(after[0].restarts + after[2].restarts, 0u);
}

TEST(Pipeline, StoppedWorkerNoticedWithinTwoSeconds) {
  PipelineEngine engine(test::engine_options(2));
  engine.start();
  const pid_t victim = static_cast<pid_t>(engine.workers()[1].pid);
  ASSERT_EQ(kill(victim, SIGSTOP), 0);
  const auto t0 = std::chrono::steady_clock::now();
  while (!engine.needs_recovery() && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5)) engine.pump(20);
  const auto waited = std::chrono::steady_clock::now() - t0;
  EXPECT_TRUE(engine.needs_recovery());
  EXPECT_LE(waited, std::chrono::milliseconds(2000));
  engine.recover();  // the silent worker was killed and restarted
  EXPECT_NE(static_cast<pid_t>(engine.workers()[1].pid), victim);
  EXPECT_EQ(generate_greedy(engine, test::chat_prompt(), 4).size(), 4u);
}

}  // namespace
}  // namespace ds
