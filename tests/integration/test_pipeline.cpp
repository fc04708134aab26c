// The multi-process pipeline on the fixture model: logits through 1, 2 and 3 worker processes
// equal the in-process forward bit for bit; greedy generation survives a SIGKILLed worker
// with exactly the tokens of an uninterrupted run; a stopped worker is noticed within 2 s.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstring>

#include "coordinator/engine/generate.h"
#include "tests/integration/engine_test_util.h"

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
    in.seqs.push_back(SeqStep{1, static_cast<uint32_t>(c.begin),
                              std::vector<int32_t>(prompt.begin() + static_cast<long>(c.begin), prompt.begin() + static_cast<long>(c.end)),
                              c.rows});
    StepOutput out;
    model.stage->forward(in, &out);
    const size_t v = model.config.n_vocab;
    for (size_t r = 0; r < c.rows.size(); ++r) rows.emplace_back(out.logits.begin() + static_cast<long>(r * v), out.logits.begin() + static_cast<long>((r + 1) * v));
  }
  return rows;
}

std::vector<std::vector<float>> pipeline_logits(PipelineEngine& engine, uint64_t seq, const std::vector<int32_t>& prompt,
                                                const std::vector<Chunk>& chunks) {
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
}

TEST(Pipeline, GreedySurvivesSigkilledWorker) {
  PipelineEngine engine(test::engine_options(3));
  engine.start();
  const std::vector<int32_t> prompt = test::chat_prompt();
  GreedyOptions plain;
  plain.seq_id = 1;
  const std::vector<int32_t> expected = generate_greedy(engine, prompt, 64, plain);
  ASSERT_EQ(expected.size(), 64u);

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
