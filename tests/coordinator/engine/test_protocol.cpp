// deltaserve.v1 contract: round trips, rejection of malformed / wrong-version frames, and the
// engine's plan codec (new sequences in full once, running ones as deltas), Assign's KV types.
#include <gtest/gtest.h>

#include <optional>
#include <random>
#include <stdexcept>
#include <string>

#include "common/ipc/protocol.h"
#include "coordinator/engine/step_codec.h"

namespace ds {
namespace {
namespace v1 = ipc::v1;

v1::Envelope round_trip(const v1::Envelope& env) {
  const std::string bytes = ipc::encode_envelope(env);
  v1::Envelope back;
  std::string why;
  EXPECT_TRUE(ipc::decode_envelope(bytes.data(), bytes.size(), &back, &why)) << why;
  return back;
}

TEST(Protocol, ControlMessagesRoundTrip) {
  v1::Envelope env;
  v1::Assign* a = env.mutable_assign();
  a->set_rank(2);
  a->set_model_path("/m.gguf");
  a->set_first_layer(5);
  a->set_last_layer(8);
  a->set_is_last(true);
  a->set_data_bind_endpoint("ipc:///tmp/x/data-2");
  a->set_epoch(7);
  const v1::Envelope back = round_trip(env);
  EXPECT_EQ(back.protocol_version(), ipc::kProtocolVersion);
  ASSERT_TRUE(back.has_assign());
  EXPECT_EQ(back.assign().SerializeAsString(), a->SerializeAsString());

  v1::Envelope hello;
  hello.mutable_hello()->set_rank(1);
  hello.mutable_hello()->set_backend(v1::BACKEND_CPU);
  hello.mutable_hello()->set_instance_id(0xfeedfacecafebeefull);
  EXPECT_EQ(round_trip(hello).hello().instance_id(), 0xfeedfacecafebeefull);
  EXPECT_STREQ(ipc::body_name(hello), "hello");
}

// Assign's KV cache types: every pair survives the envelope; empty means "the worker's own";
// a name no build knows is a clear error, never a crash.
TEST(Protocol, AssignKvCacheTypesRoundTrip) {
  const KvType types[] = {KvType::kF32, KvType::kBf16, KvType::kF16, KvType::kQ8_0, KvType::kFp8, KvType::kQ4r};
  for (KvType k : types) {
    for (KvType v : types) {
      v1::Envelope env;
      ipc::set_assign_kv_types(env.mutable_assign(), k, v);
      const v1::Assign back = round_trip(env).assign();
      EXPECT_EQ(ipc::assign_kv_type("kv_cache_type_k", back.kv_cache_type_k()), k);
      EXPECT_EQ(ipc::assign_kv_type("kv_cache_type_v", back.kv_cache_type_v()), v);
    }
  }
  EXPECT_EQ(ipc::assign_kv_type("kv_cache_type_k", v1::Assign{}.kv_cache_type_k()), std::nullopt);
  for (const char* bad : {"q4_0", "F32", "f32 ", "\x01"}) {
    try {
      ipc::assign_kv_type("kv_cache_type_k", bad);
      ADD_FAILURE() << bad << " was taken";
    } catch (const std::runtime_error& e) {
      EXPECT_EQ(std::string(e.what()), "Assign.kv_cache_type_k = '" + std::string(bad) +
                                           "' is not a KV cache type (f32, bf16, f16, q8_0, fp8, q4r)");
    }
  }
}

TEST(Protocol, StepMessagesRoundTrip) {
  v1::Envelope env;
  v1::StepResult* r = env.mutable_step_result();
  r->set_plan_id(42);
  r->add_seq_ids(9);
  r->add_rows(3);
  r->add_tokens(151000);
  r->add_logsumexp(12.25);
  r->set_top_k(2);
  r->add_top_ids(151000);
  r->add_top_ids(5);
  r->add_top_logprobs(-0.5f);
  r->add_top_logprobs(-1.5f);
  const v1::Envelope back = round_trip(env);
  EXPECT_EQ(back.step_result().SerializeAsString(), r->SerializeAsString());
}

TEST(Protocol, RejectsMalformedAndWrongVersion) {
  v1::Envelope env;
  env.mutable_shutdown()->set_reason("bye");
  std::string bytes = ipc::encode_envelope(env);
  v1::Envelope out;
  std::string why;
  // Wrong version.
  v1::Envelope wrong = env;
  wrong.set_protocol_version(2);
  std::string wrong_bytes = wrong.SerializeAsString();
  EXPECT_FALSE(ipc::decode_envelope(wrong_bytes.data(), wrong_bytes.size(), &out, &why));
  EXPECT_NE(why.find("version"), std::string::npos);
  // No body.
  v1::Envelope empty;
  empty.set_protocol_version(ipc::kProtocolVersion);
  std::string empty_bytes = empty.SerializeAsString();
  EXPECT_FALSE(ipc::decode_envelope(empty_bytes.data(), empty_bytes.size(), &out, &why));
  // Truncated frames and random bytes never decode into something accepted silently wrong:
  // either rejected or a version-1 envelope with a body (checked by the receivers).
  for (size_t n = 0; n < bytes.size(); ++n) {
    if (ipc::decode_envelope(bytes.data(), n, &out, &why)) {
      EXPECT_EQ(out.protocol_version(), ipc::kProtocolVersion);
    }
  }
  std::mt19937 rng(1);
  int accepted = 0;
  for (int i = 0; i < 2000; ++i) {
    std::string junk(rng() % 64, '\0');
    for (char& c : junk) c = static_cast<char>(rng());
    accepted += ipc::decode_envelope(junk.data(), junk.size(), &out, &why) ? 1 : 0;
  }
  EXPECT_LT(accepted, 20);
}

SeqRequest decode_request(uint64_t id, uint32_t pos, std::vector<int32_t> tokens) {
  SeqRequest r;
  r.seq_id = id;
  r.start_pos = pos;
  r.tokens = std::move(tokens);
  r.logit_rows = {static_cast<uint32_t>(r.tokens.size() - 1)};
  r.random_u = {0.25};
  return r;
}

TEST(StepCodec, NewSequenceInFullThenDeltas) {
  SentSamplingMap sent;
  SeqRequest prompt = decode_request(7, 0, {1, 2, 3, 4});
  prompt.sampling.temperature = 0.7f;
  const v1::StepPlan first = encode_plan({prompt}, 1, 1, &sent);
  EXPECT_EQ(first.sampling_size(), 1);
  EXPECT_EQ(first.token_ids_size(), 4);
  SeqRequest next = decode_request(7, 4, {99});
  next.sampling.temperature = 0.7f;
  const v1::StepPlan delta = encode_plan({next}, 2, 1, &sent);
  EXPECT_EQ(delta.sampling_size(), 0);  // a decode step is just the new token
  EXPECT_EQ(delta.token_ids_size(), 1);
  EXPECT_EQ(delta.start_positions(0), 4u);
  EXPECT_LT(delta.ByteSizeLong(), 40u);
  next.sampling.temperature = 0.0f;  // changed inputs are sent again
  EXPECT_EQ(encode_plan({next}, 3, 1, &sent).sampling_size(), 1);
  next.sampling.min_p = 0.05f;  // every field of the rule counts, and travels
  const v1::StepPlan with_min_p = encode_plan({next}, 4, 1, &sent);
  ASSERT_EQ(with_min_p.sampling_size(), 1);
  EXPECT_FLOAT_EQ(with_min_p.sampling(0).params().min_p(), 0.05f);
}

TEST(StepCodec, PlacementColumnsAndReleases) {
  SentSamplingMap sent;
  SeqRequest a = decode_request(7, 0, {1, 2, 3});
  a.cache = SeqCache{3, true, std::nullopt, 1u, {10, 11}};
  const v1::StepPlan first = encode_plan({a}, {}, true, 1, 1, &sent);
  EXPECT_TRUE(first.managed_memory());
  EXPECT_EQ(first.state_slots(0), 3u);
  EXPECT_TRUE(first.is_new(0));
  EXPECT_EQ(first.load_snapshots(0), -1);
  EXPECT_EQ(first.save_snapshots(0), 1);
  EXPECT_EQ(first.n_block_ids(0), 2u);
  EXPECT_EQ(first.block_ids_size(), 2);

  // Released, then placed again from a prefix hit (is_new at position 16): sampling resent.
  SeqRequest hit = decode_request(7, 16, {4});
  hit.cache = SeqCache{0, true, 1u, std::nullopt, {10, 11}};
  const v1::StepPlan again = encode_plan({hit}, {7}, true, 2, 1, &sent);
  ASSERT_EQ(again.released_seq_ids_size(), 1);
  EXPECT_EQ(again.released_seq_ids(0), 7u);
  EXPECT_EQ(again.sampling_size(), 1);
  EXPECT_EQ(again.load_snapshots(0), 1);

  EXPECT_THROW(encode_plan({decode_request(8, 0, {1})}, {}, true, 3, 1, &sent), StepFailed);  // placement missing
  EXPECT_THROW(encode_plan({a}, {}, false, 3, 1, &sent), StepFailed);  // placement on self-managed workers
}

TEST(StepCodec, RejectsInconsistentRequestsAndResults) {
  SentSamplingMap sent;
  SeqRequest bad = decode_request(1, 0, {1, 2});
  bad.logit_rows = {5};
  EXPECT_THROW(encode_plan({bad}, 1, 1, &sent), StepFailed);
  EXPECT_THROW(encode_plan({}, 1, 1, &sent), StepFailed);
  const v1::StepPlan plan = encode_plan({decode_request(1, 0, {1, 2})}, 1, 1, &sent);
  v1::StepResult result;  // no rows for a plan that wants one
  EXPECT_THROW(decode_result(plan, result, {}), StepFailed);
}

}  // namespace
}  // namespace ds
