// A live deltaserve-worker fed truncated, random, wrong-version and inconsistent frames on its
// control and data sockets, and bad shared-memory ring descriptors, keeps serving: the test
// plays the coordinator (and stage 0) and, afterwards, still gets correct step results.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <random>

#include "common/ipc/channel.h"
#include "common/ipc/endpoints.h"
#include "common/ipc/shm_ring.h"
#include "coordinator/engine/supervisor.h"
#include "tests/integration/engine_test_util.h"
#include "worker/daemon/stage_handoff.h"

namespace ds {
namespace {
namespace v1 = ipc::v1;

// The test's side of the protocol: a ROUTER the worker connects to.
class FakeCoordinator {
 public:
  explicit FakeCoordinator(uint32_t rank)
      : endpoint_(ipc::make_ipc_control_endpoint()),
        router_(ctx_, ipc::SocketRole::kRouter, endpoint_),
        supervisor_(std::string(DS_BIN_DIR) + "/deltaserve-worker", rank + 1, [this](uint32_t r) {
          return std::vector<std::string>{"--coordinator", endpoint_, "--rank", std::to_string(r)};
        }) {}
  ~FakeCoordinator() {
    supervisor_.stop_all(std::chrono::milliseconds(2000));
    ipc::remove_ipc_endpoint_dir(endpoint_);
  }

  // Waits for a message whose body is `want`, skipping heartbeats and anything else.
  ipc::Received wait_for(v1::Envelope::BodyCase want) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < deadline) {
      ipc::Received msg;
      std::string why;
      if (router_.recv(&msg, 50, &why) == ipc::RecvStatus::kMessage && msg.env.body_case() == want) return msg;
    }
    ADD_FAILURE() << "timed out waiting for body case " << want;
    return {};
  }
  void send(const v1::Envelope& env, const std::vector<uint8_t>& bulk = {}) {
    ASSERT_TRUE(router_.send(env, bulk, peer));
  }
  void send_junk(std::mt19937& rng, const std::string& valid) {
    for (int i = 0; i < 50; ++i) {
      std::string junk(rng() % 200, '\0');
      for (char& c : junk) c = static_cast<char>(rng());
      router_.send_raw({peer, junk});
      router_.send_raw({peer, valid.substr(0, rng() % std::max<size_t>(valid.size(), 1))});
    }
    router_.send_raw({peer, valid, "x", "y"});  // too many frames
    router_.send_raw({peer, ""});
  }
  bool worker_alive() { return supervisor_.poll().empty(); }
  const std::string& endpoint() const { return endpoint_; }
  LocalSupervisor& supervisor() { return supervisor_; }

  std::string peer;

 private:
  ipc::Context ctx_;
  std::string endpoint_;
  ipc::ZmqChannel router_;
  LocalSupervisor supervisor_;
};

v1::Envelope wrong_version(v1::Envelope env) {
  env.set_protocol_version(ipc::kProtocolVersion + 1);
  return env;
}

v1::StepPlan plan_for(const std::vector<int32_t>& tokens, uint64_t plan_id) {
  v1::StepPlan p;
  p.set_plan_id(plan_id);
  p.set_epoch(1);
  p.add_seq_ids(1);
  p.add_start_positions(0);
  p.add_n_tokens(static_cast<uint32_t>(tokens.size()));
  p.mutable_token_ids()->Add(tokens.begin(), tokens.end());
  p.add_n_logit_rows(1);
  p.add_logit_rows(static_cast<uint32_t>(tokens.size() - 1));
  p.add_random_u(0.0);
  return p;
}

v1::Assign assign_for(const FakeCoordinator& c, uint32_t rank, StageRange range, uint32_t n_layer) {
  v1::Assign a;
  a.set_rank(rank);
  a.set_model_path(test::tiny_model_path());
  a.set_first_layer(range.first_layer);
  a.set_last_layer(range.last_layer);
  a.set_is_first(range.first_layer == 0);
  a.set_is_last(range.last_layer == n_layer);
  a.set_data_bind_endpoint(ipc::data_endpoints(c.endpoint(), rank, "localhost").bind);
  a.set_n_threads(1);
  a.set_epoch(1);
  return a;
}

int32_t reference_next_token(const std::vector<int32_t>& prompt) {
  test::InProcessModel model;
  StepInput in;
  in.seqs.push_back(SeqStep{1, 0, prompt, {static_cast<uint32_t>(prompt.size() - 1)}});
  StepOutput out;
  model.stage->forward(in, &out);
  return argmax_token(out.logits.data(), out.logits.size());
}

TEST(WorkerFuzz, ControlSocketGarbageThenServes) {
  FakeCoordinator c(0);
  c.supervisor().start_all();
  c.peer = c.wait_for(v1::Envelope::kHello).peer;
  std::mt19937 rng(5);
  const std::vector<int32_t> prompt = test::chat_prompt();
  v1::Envelope step;
  *step.mutable_step_plan() = plan_for(prompt, 1);
  c.send_junk(rng, ipc::encode_envelope(step));
  c.send(wrong_version(step));
  c.send(step);  // before Assign: answered with a StepError
  EXPECT_EQ(c.wait_for(v1::Envelope::kStepError).env.step_error().plan_id(), 1u);

  test::InProcessModel ref;
  v1::Envelope assign;
  *assign.mutable_assign() = assign_for(c, 0, {0, ref.config.n_layer}, ref.config.n_layer);
  c.send(assign);
  ASSERT_TRUE(c.wait_for(v1::Envelope::kReady).env.ready().ok());

  c.send_junk(rng, ipc::encode_envelope(step));
  v1::Envelope bad = step;
  bad.mutable_step_plan()->set_plan_id(2);
  bad.mutable_step_plan()->set_token_ids(0, -5);  // outside the vocabulary
  c.send(bad);
  EXPECT_EQ(c.wait_for(v1::Envelope::kStepError).env.step_error().plan_id(), 2u);
  bad.mutable_step_plan()->set_plan_id(3);
  bad.mutable_step_plan()->add_n_tokens(4);  // inconsistent columns
  c.send(bad);
  EXPECT_EQ(c.wait_for(v1::Envelope::kStepError).env.step_error().plan_id(), 3u);

  step.mutable_step_plan()->set_plan_id(4);
  c.send(step);
  const ipc::Received result = c.wait_for(v1::Envelope::kStepResult);
  EXPECT_EQ(result.env.step_result().plan_id(), 4u);
  ASSERT_EQ(result.env.step_result().tokens_size(), 1);
  EXPECT_EQ(result.env.step_result().tokens(0), reference_next_token(prompt));
  EXPECT_TRUE(c.worker_alive());
}

TEST(WorkerFuzz, DataSocketGarbageThenServes) {
  FakeCoordinator c(1);
  c.supervisor().start_all();  // ranks 0 and 1; only rank 1 is assigned, rank 0 idles
  test::InProcessModel first_half(StageRange{0, 4});
  const uint32_t n_layer = first_half.config.n_layer;
  ipc::Received hello;
  do {
    hello = c.wait_for(v1::Envelope::kHello);
  } while (hello.env.hello().rank() != 1);
  c.peer = hello.peer;
  v1::Envelope assign;
  *assign.mutable_assign() = assign_for(c, 1, {4, n_layer}, n_layer);
  c.send(assign);
  ASSERT_TRUE(c.wait_for(v1::Envelope::kReady).env.ready().ok());

  ipc::Context ctx;
  ipc::ZmqChannel push(ctx, ipc::SocketRole::kPush, assign.assign().data_bind_endpoint());
  const std::vector<int32_t> prompt = test::chat_prompt();
  StepInput in;
  in.seqs.push_back(SeqStep{1, 0, prompt, {}});
  StepOutput unused;
  std::vector<float> hidden;
  StageHandoff(first_half.config.n_embd).step(*first_half.stage, in, {}, &unused, &hidden);
  v1::Envelope fwd;
  *fwd.mutable_stage_forward()->mutable_plan() = plan_for(prompt, 7);
  std::vector<uint8_t> bytes(hidden.size() * sizeof(float));
  std::memcpy(bytes.data(), hidden.data(), bytes.size());
  fwd.mutable_stage_forward()->mutable_hidden()->set_dtype(v1::DTYPE_F32);
  fwd.mutable_stage_forward()->mutable_hidden()->set_nbytes(bytes.size());

  std::mt19937 rng(9);
  for (int i = 0; i < 50; ++i) {
    std::string junk(rng() % 300, '\0');
    for (char& ch : junk) ch = static_cast<char>(rng());
    push.send_raw({junk});
  }
  push.send(wrong_version(fwd), bytes);
  push.send(fwd, std::vector<uint8_t>(bytes.begin(), bytes.begin() + 100));  // truncated chunk
  EXPECT_EQ(c.wait_for(v1::Envelope::kStepError).env.step_error().plan_id(), 7u);
  push.send(fwd, bytes);
  const ipc::Received result = c.wait_for(v1::Envelope::kStepResult);
  ASSERT_EQ(result.env.step_result().tokens_size(), 1);
  EXPECT_EQ(result.env.step_result().tokens(0), reference_next_token(prompt));
  EXPECT_TRUE(c.worker_alive());
}

// Stage 0 played by the test through a shared-memory ring: every bad descriptor is answered
// with a StepError naming it, a good one with the right token, and its slot is handed back.
TEST(WorkerFuzz, BadRingDescriptorsThenServes) {
  FakeCoordinator c(1);
  c.supervisor().start_all();
  test::InProcessModel first_half(StageRange{0, 4});
  const uint32_t n_layer = first_half.config.n_layer;
  ipc::Received hello;
  do {
    hello = c.wait_for(v1::Envelope::kHello);
  } while (hello.env.hello().rank() != 1);
  c.peer = hello.peer;
  v1::Envelope assign;
  *assign.mutable_assign() = assign_for(c, 1, {4, n_layer}, n_layer);
  c.send(assign);
  ASSERT_TRUE(c.wait_for(v1::Envelope::kReady).env.ready().ok());

  const std::vector<int32_t> prompt = test::chat_prompt();
  StepInput in;
  in.seqs.push_back(SeqStep{1, 0, prompt, {}});
  StepOutput unused;
  std::vector<float> hidden;
  StageHandoff(first_half.config.n_embd).step(*first_half.stage, in, {}, &unused, &hidden);
  const std::span<const uint8_t> bytes(reinterpret_cast<const uint8_t*>(hidden.data()), hidden.size() * sizeof(float));
  const std::string ring_name = ipc::shm_ring_name(assign.assign().data_bind_endpoint());
  ipc::ShmRingProducer ring(ring_name, {2, bytes.size()}, 1234);
  const std::optional<ipc::SlotRef> ref = ring.write(bytes, 0);
  ASSERT_TRUE(ref.has_value());

  ipc::Context ctx;
  ipc::ZmqChannel push(ctx, ipc::SocketRole::kPush, assign.assign().data_bind_endpoint());
  uint64_t plan_id = 20;
  auto send_descriptor = [&](const std::string& name, ipc::SlotRef r, uint64_t nbytes) {
    v1::Envelope fwd;
    *fwd.mutable_stage_forward()->mutable_plan() = plan_for(prompt, ++plan_id);
    v1::HiddenChunk* chunk = fwd.mutable_stage_forward()->mutable_hidden();
    chunk->set_dtype(v1::DTYPE_F32);
    chunk->set_nbytes(nbytes);
    chunk->mutable_shm()->set_ring(name);
    chunk->mutable_shm()->set_generation(r.generation);
    chunk->mutable_shm()->set_slot(r.slot);
    chunk->mutable_shm()->set_sequence(r.sequence);
    push.send(fwd);
  };
  auto expect_error = [&](const std::string& words) {
    const ipc::Received err = c.wait_for(v1::Envelope::kStepError);
    EXPECT_EQ(err.env.step_error().plan_id(), plan_id);
    EXPECT_NE(err.env.step_error().message().find(words), std::string::npos) << err.env.step_error().message();
  };
  ipc::SlotRef bad = *ref;
  bad.slot = 2;
  send_descriptor(ring_name, bad, bytes.size());
  expect_error("out of range");
  send_descriptor(ring_name, *ref, bytes.size() + 4);
  expect_error("exceed the slot size");
  bad = *ref;
  bad.sequence = 2;
  send_descriptor(ring_name, bad, bytes.size());
  expect_error("stale or torn");
  bad = *ref;
  bad.generation = 99;
  send_descriptor(ring_name, bad, bytes.size());
  expect_error("stale");
  send_descriptor("/deltaserve-ring-doesnotexist", *ref, bytes.size());
  expect_error("shm_open");
  send_descriptor("/not-ours", *ref, bytes.size());
  expect_error("not a deltaserve ring");
  EXPECT_FALSE(ring.all_free()) << "no bad descriptor freed the slot";

  send_descriptor(ring_name, *ref, bytes.size());
  const ipc::Received result = c.wait_for(v1::Envelope::kStepResult);
  ASSERT_EQ(result.env.step_result().tokens_size(), 1);
  EXPECT_EQ(result.env.step_result().tokens(0), reference_next_token(prompt));
  EXPECT_TRUE(ring.all_free()) << "the worker handed the slot back";
  EXPECT_TRUE(c.worker_alive());
}

}  // namespace
}  // namespace ds
