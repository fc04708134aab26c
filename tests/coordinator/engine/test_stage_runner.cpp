// The worker's StageRunner on a fake model: plan validation, digests with the shared sampling
// rule, sampling inputs kept across deltas, full logits, hidden chunks between stages, drops.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "common/error.h"
#include "coordinator/engine/step_codec.h"
#include "tests/coordinator/engine/fake_stage.h"
#include "worker/daemon/stage_runner.h"

namespace ds {
namespace {
namespace v1 = ipc::v1;
using test::FakeStage;

StageRunner make_runner(StageRange range, uint32_t rank) {
  return StageRunner(std::make_unique<FakeStage>(range, 8), StageShape{rank, FakeStage::kEmbd, FakeStage::kVocab});
}

SeqRequest request(uint64_t id, uint32_t pos, std::vector<int32_t> tokens, double u) {
  SeqRequest r;
  r.seq_id = id;
  r.start_pos = pos;
  r.tokens = std::move(tokens);
  r.logit_rows = {static_cast<uint32_t>(r.tokens.size() - 1)};
  r.random_u = {u};
  r.sampling = SamplingRule{0.9f, 0, 1.0f};
  r.return_full_logits = true;
  return r;
}

const google::protobuf::RepeatedPtrField<v1::StageTiming> kNoTimings;

TEST(StageRunner, TwoStagesProduceDigestsByTheSharedRule) {
  StageRunner s0 = make_runner({0, 4}, 0), s1 = make_runner({4, 8}, 1);
  SentSamplingMap sent;
  for (uint32_t step = 0; step < 3; ++step) {
    const SeqRequest r = step == 0 ? request(5, 0, {3, 4, 5}, 0.3) : request(5, 2 + step, {7}, 0.6);
    const v1::StepPlan plan = encode_plan({r}, step + 1, 1, &sent);
    const StageOutputMessage mid = s0.run(plan, {}, kNoTimings);
    ASSERT_TRUE(mid.env.has_stage_forward());
    EXPECT_EQ(mid.bulk.size(), plan.token_ids_size() * FakeStage::kEmbd * sizeof(float));
    const StageOutputMessage last = s1.run(mid.env.stage_forward().plan(), mid.bulk, mid.env.stage_forward().timings());
    ASSERT_TRUE(last.env.has_step_result());
    const StepOutcome out = decode_result(plan, last.env.step_result(), last.bulk);
    ASSERT_EQ(out.rows.size(), 1u);
    ASSERT_EQ(out.rows[0].logits.size(), FakeStage::kVocab);  // sampling inputs survive deltas
    EXPECT_EQ(out.rows[0].token, sample_token(out.rows[0].logits.data(), FakeStage::kVocab, r.sampling, r.random_u[0]));
    EXPECT_EQ(out.timings.size(), 2u);
  }
  EXPECT_EQ(s1.n_sequences(), 1u);
  v1::DropSequences drop;
  drop.add_seq_ids(5);
  s1.drop(drop);
  EXPECT_EQ(s1.n_sequences(), 0u);
}

// Digest requests reach the last stage's model (one per logit row, with the row's rule and u)
// unless the sequence wants its full logits; digests the model returns are packed as they are,
// and equal the host's digest of the same logits.
TEST(StageRunner, LastStageAsksTheModelForDigests) {
  auto host = std::make_unique<FakeStage>(StageRange{0, 8}, 8);
  auto device = std::make_unique<FakeStage>(StageRange{0, 8}, 8);
  device->digest_in_model = true;
  FakeStage* dev = device.get();
  StageRunner on_host(std::move(host), StageShape{0, FakeStage::kEmbd, FakeStage::kVocab});
  StageRunner on_device(std::move(device), StageShape{0, FakeStage::kEmbd, FakeStage::kVocab});
  SentSamplingMap sent_h, sent_d;
  for (bool full : {false, true}) {
    SeqRequest r = request(full ? 8 : 7, 0, {3, 4, 5}, 0.4);
    r.sampling = SamplingRule{0.8f, 5, 0.9f};
    r.return_full_logits = full;
    const v1::StepPlan host_plan = encode_plan({r}, 1, 1, &sent_h);
    const StageOutputMessage h = on_host.run(host_plan, {}, kNoTimings);
    const StepOutcome a = decode_result(host_plan, h.env.step_result(), h.bulk);
    const v1::StepPlan plan = encode_plan({r}, 1, 1, &sent_d);
    const StageOutputMessage m = on_device.run(plan, {}, kNoTimings);
    EXPECT_EQ(dev->last_digest_rows(), full ? 0u : 1u);
    const StepOutcome b = decode_result(plan, m.env.step_result(), m.bulk);
    ASSERT_EQ(b.rows.size(), 1u);
    EXPECT_EQ(b.rows[0].token, a.rows[0].token);
    EXPECT_EQ(b.rows[0].top_ids, a.rows[0].top_ids);
    EXPECT_EQ(b.rows[0].logsumexp, a.rows[0].logsumexp);
    EXPECT_EQ(b.rows[0].logits.size(), full ? FakeStage::kVocab : 0u);
    EXPECT_EQ(a.rows[0].logits.size(), full ? FakeStage::kVocab : 0u);
  }
}

// Speculating plans (issue 10): greedy sequences' verify rows are digested by the model too
// (their verdict needs only each row's argmax) and give the same tokens, verdicts and drafts as
// full logits digested on the host; a sampled (temperature > 0) speculating sequence keeps full
// logits (its rejection rule needs p), so the model is asked for no digests.
TEST(StageRunner, GreedySpeculationUsesTheModelsDigests) {
  for (const float temperature : {0.0f, 0.7f}) {
    auto host = std::make_unique<FakeStage>(StageRange{0, 8}, 8);
    auto device = std::make_unique<FakeStage>(StageRange{0, 8}, 8);
    device->digest_in_model = true;
    FakeStage* dev = device.get();
    StageRunner on_host(std::move(host), StageShape{0, FakeStage::kEmbd, FakeStage::kVocab});
    StageRunner on_device(std::move(device), StageShape{0, FakeStage::kEmbd, FakeStage::kVocab});
    SentSamplingMap sent_h, sent_d;
    // Step 1: the prompt, two drafts wanted. Step 2: verify them (row = emitted token + drafts).
    SeqRequest r = request(9, 0, {3, 4, 5}, 0.4);
    r.sampling = SamplingRule{temperature, 0, 1.0f};
    r.return_full_logits = false;
    r.spec_k = 2;
    r.spec_random_u = {0.25, 0.75};
    std::vector<StepOutcome> host_out, dev_out;
    for (uint32_t step = 1; step <= 2; ++step) {
      const v1::StepPlan hp = encode_plan({r}, step, 1, &sent_h), dp = encode_plan({r}, step, 1, &sent_d);
      const StageOutputMessage h = on_host.run(hp, {}, kNoTimings), d = on_device.run(dp, {}, kNoTimings);
      host_out.push_back(decode_result(hp, h.env.step_result(), h.bulk));
      dev_out.push_back(decode_result(dp, d.env.step_result(), d.bulk));
      EXPECT_EQ(dev->last_digest_rows(), temperature > 0 ? 0u : r.logit_rows.size()) << "step " << step;
      const StepOutcome& o = host_out.back();
      ASSERT_EQ(o.spec.size(), 1u);
      ASSERT_EQ(o.spec[0].drafts.size(), 2u);
      const uint32_t next = r.start_pos + static_cast<uint32_t>(r.tokens.size()) - r.n_draft + o.spec[0].accepted;
      r.start_pos = next;
      r.tokens = {o.rows[o.spec[0].accepted].token, o.spec[0].drafts[0], o.spec[0].drafts[1]};
      r.logit_rows = {0, 1, 2};
      r.random_u = {0.1, 0.2, 0.3};
      r.n_draft = 2;
      r.spec_random_u = {0.5, 0.5, 0.25, 0.75};
    }
    EXPECT_GT(dev->mtp_rows(), 0u);
    for (size_t step = 0; step < host_out.size(); ++step) {
      const StepOutcome &a = host_out[step], &b = dev_out[step];
      ASSERT_EQ(b.rows.size(), a.rows.size());
      for (size_t i = 0; i < a.rows.size(); ++i) {
        EXPECT_EQ(b.rows[i].token, a.rows[i].token) << "step " << step << " row " << i;
        EXPECT_FLOAT_EQ(b.rows[i].token_logprob, a.rows[i].token_logprob) << "step " << step << " row " << i;
      }
      ASSERT_EQ(b.spec.size(), 1u);
      EXPECT_EQ(b.spec[0].accepted, a.spec[0].accepted);
      EXPECT_EQ(b.spec[0].drafts, a.spec[0].drafts);
    }
  }
}

// logit_bias and min_tokens travel with the sampling rule and reach the model as edits of the
// logit rows they concern, by position: a +100 bias takes the pick, -inf masks an id while the
// position is inside min_tokens, and the digests (device path) see the same edited rows.
TEST(StageRunner, LogitAdjustmentsEditTheRowsTheyConcern) {
  for (const bool device : {false, true}) {
    auto model = std::make_unique<FakeStage>(StageRange{0, 8}, 8);
    model->digest_in_model = device;
    StageRunner s(std::move(model), StageShape{0, FakeStage::kEmbd, FakeStage::kVocab});
    SentSamplingMap sent;
    uint64_t step_id = 0;
    const auto step = [&](const SeqRequest& q) {
      const v1::StepPlan plan = encode_plan({q}, ++step_id, 1, &sent);
      const StageOutputMessage m = s.run(plan, {}, kNoTimings);
      return decode_result(plan, m.env.step_result(), m.bulk);
    };
    SeqRequest r = request(4, 0, {3, 4, 5}, 0.5);  // a 3-token prompt: its last row picks token 0
    r.sampling = SamplingRule{0.0f, 0, 1.0f};
    r.return_full_logits = !device;
    r.adjust.bias = {{7, 100.0f}, {11, -100.0f}};
    r.adjust.min_tokens = 2;
    r.adjust.masked = {7, 9};
    r.adjust.prompt_len = 3;
    for (uint32_t generated = 0; generated < 3; ++generated) {
      const StepOutcome o = step(r);
      ASSERT_EQ(o.rows.size(), 1u);
      const int32_t token = o.rows[0].token;
      if (generated < r.adjust.min_tokens) {
        EXPECT_NE(token, 7) << "generated " << generated << (device ? " (device)" : "");
        EXPECT_NE(token, 9) << "generated " << generated;
      } else {
        EXPECT_EQ(token, 7) << "the +100 bias takes the pick once min_tokens were generated";
      }
      EXPECT_NE(token, 11);
      if (!device) {
        const std::vector<float>& l = o.rows[0].logits;
        ASSERT_EQ(l.size(), FakeStage::kVocab);
        EXPECT_EQ(std::isinf(l[7]) && l[7] < 0, generated < r.adjust.min_tokens);
        EXPECT_EQ(std::isinf(l[9]) && l[9] < 0, generated < r.adjust.min_tokens);
        if (generated >= r.adjust.min_tokens) {
          EXPECT_GT(l[7], 98.0f);  // the fake's logits lie in [-1, 1]
        }
        EXPECT_LT(l[11], -98.0f);
      }
      r.start_pos += static_cast<uint32_t>(r.tokens.size());
      r.tokens = {token};
      r.logit_rows = {0};
    }
  }
}

// Grammar masks travel packed (a shared mask once, a sparse one as an id list) and reach the
// model's rows: every pick, host or device digest, is an allowed id, and an unmasked row of the
// same plan is free; a mask that allows nothing, masks of another plan and masks the coordinator
// gave up on fail the step.
TEST(StageRunner, TokenMasksLimitTheRowsTheyConcern) {
  for (const bool device : {false, true}) {
    auto model = std::make_unique<FakeStage>(StageRange{0, 8}, 8);
    model->digest_in_model = device;
    StageRunner s(std::move(model), StageShape{0, FakeStage::kEmbd, FakeStage::kVocab});
    SentSamplingMap sent;
    SeqRequest a = request(1, 0, {3, 4, 5}, 0.5), b = request(2, 0, {8}, 0.5), c = request(3, 0, {6, 7}, 0.5);
    SeqRequest free = request(5, 0, {8}, 0.5);  // b's tokens, unmasked
    for (SeqRequest* r : {&a, &b, &c, &free}) {
      r->sampling = SamplingRule{0.0f, 0, 1.0f};
      r->return_full_logits = !device;
    }
    // The masks follow each plan in their own message, fetched when the LM head needs them.
    std::vector<SeqRequest> in_plan;
    int fetched = 0;
    const MaskFetch fetch = [&](const v1::StepPlan& p) {
      ++fetched;
      return encode_step_masks(in_plan, p.plan_id(), p.epoch());
    };
    const auto run = [&](const v1::StepPlan& p) {
      const StageOutputMessage m = s.run(p, {}, kNoTimings, {}, {}, fetch);
      return decode_result(p, m.env.step_result(), m.bulk);
    };
    const int32_t free_pick = run(encode_plan({free}, 1, 1, &sent)).rows[0].token;
    // a: only ids 9 and 30; b: every id but the one it picks unmasked; c: a's mask.
    const uint32_t only_9_30 = (1u << 9) | (1u << 30);
    a.mask_words = b.mask_words = c.mask_words = 1;
    a.mask_rows = b.mask_rows = c.mask_rows = {0};
    a.mask_bits = {only_9_30};
    b.mask_bits = {~(1u << free_pick)};
    c.mask_bits = {only_9_30};
    in_plan = {a, b, c};
    const v1::StepPlan plan = encode_plan(in_plan, 2, 1, &sent);
    EXPECT_TRUE(plan.masks_follow());
    EXPECT_EQ(encode_step_masks(in_plan, 2, 1).masks().sizes_size(), 2) << "a and c share one mask";
    const StepOutcome o = run(plan);
    EXPECT_EQ(fetched, 1);
    ASSERT_EQ(o.rows.size(), 3u);
    EXPECT_TRUE(o.rows[0].token == 9 || o.rows[0].token == 30) << o.rows[0].token;
    EXPECT_NE(o.rows[1].token, free_pick);
    EXPECT_TRUE(o.rows[2].token == 9 || o.rows[2].token == 30) << o.rows[2].token;
    SeqRequest none = request(4, 0, {1}, 0.5);
    none.mask_words = 1;
    none.mask_rows = {0};
    none.mask_bits = {0};
    in_plan = {none};
    const v1::StepPlan bad = encode_plan(in_plan, 3, 1, &sent);
    EXPECT_THROW(s.run(bad, {}, kNoTimings, {}, {}, fetch), FormatError);
    EXPECT_THROW(s.run(bad, {}, kNoTimings), FormatError) << "masks follow, but nothing brings them";
    // Masks of another plan, or given up by the coordinator, fail the step.
    in_plan = {a};
    const v1::StepPlan next = encode_plan(in_plan, 4, 1, &sent);
    const MaskFetch wrong = [&](const v1::StepPlan&) { return encode_step_masks(in_plan, 99, 1); };
    EXPECT_THROW(s.run(next, {}, kNoTimings, {}, {}, wrong), FormatError);
    const MaskFetch abandoned = [&](const v1::StepPlan& p) {
      v1::StepMasks m;
      m.set_plan_id(p.plan_id());
      m.set_abandoned("matcher failed");
      return m;
    };
    EXPECT_THROW(s.run(encode_plan(in_plan, 5, 1, &sent), {}, kNoTimings, {}, {}, abandoned), std::runtime_error);
  }
}

// The scheduler's placement travels column-wise and reaches the model unchanged; releases are
// applied before the step.
TEST(StageRunner, PlacementAndReleasesReachTheModel) {
  auto model = std::make_unique<FakeStage>(StageRange{0, 8}, 8);
  const FakeStage* fake = model.get();
  StageRunner s(std::move(model), StageShape{0, FakeStage::kEmbd, FakeStage::kVocab});
  SentSamplingMap sent;
  SeqRequest a = request(5, 0, {3, 4, 5}, 0.3), b = request(6, 0, {1}, 0.5);
  a.cache = SeqCache{2, true, std::nullopt, 4u, {7, 3}};
  b.cache = SeqCache{0, true, std::nullopt, std::nullopt, {1}};
  s.run(encode_plan({a, b}, {}, true, 1, 1, &sent), {}, kNoTimings);
  ASSERT_EQ(fake->last_cache().size(), 2u);
  EXPECT_EQ(fake->last_cache()[0].state_slot, 2u);
  EXPECT_TRUE(fake->last_cache()[0].is_new);
  EXPECT_FALSE(fake->last_cache()[0].load_snapshot.has_value());
  EXPECT_EQ(fake->last_cache()[0].save_snapshot, std::optional<uint32_t>(4));
  EXPECT_EQ(fake->last_cache()[0].block_ids, (std::vector<uint32_t>{7, 3}));
  EXPECT_EQ(fake->last_cache()[1].block_ids, (std::vector<uint32_t>{1}));

  SeqRequest next = request(5, 3, {9}, 0.1);
  next.cache = SeqCache{2, false, std::nullopt, std::nullopt, {8}};
  s.run(encode_plan({next}, {6}, true, 2, 1, &sent), {}, kNoTimings);
  EXPECT_EQ(fake->dropped(), (std::vector<uint64_t>{6}));
  ASSERT_EQ(fake->last_cache().size(), 1u);
  EXPECT_FALSE(fake->last_cache()[0].is_new);
  EXPECT_EQ(fake->last_cache()[0].block_ids, (std::vector<uint32_t>{8}));
  EXPECT_EQ(s.n_sequences(), 1u);

  v1::StepPlan broken = encode_plan({next}, {}, true, 3, 1, &sent);
  broken.add_block_ids(5);  // more block ids than n_block_ids announce
  EXPECT_THROW(s.run(broken, {}, kNoTimings), FormatError);
  broken = encode_plan({request(7, 0, {1}, 0.1)}, 4, 1, &sent);
  broken.add_state_slots(1);  // placement columns on a plan without managed memory
  EXPECT_THROW(s.run(broken, {}, kNoTimings), FormatError);
}

TEST(StageRunner, RejectsInconsistentPlansAndChunks) {
  StageRunner s0 = make_runner({0, 8}, 0);
  SentSamplingMap sent;
  v1::StepPlan plan = encode_plan({request(1, 0, {1, 2}, 0.0)}, 1, 1, &sent);
  v1::StepPlan bad = plan;
  bad.add_token_ids(3);
  EXPECT_THROW(s0.run(bad, {}, kNoTimings), FormatError);
  bad = plan;
  bad.set_token_ids(0, 1000);  // outside the vocabulary
  EXPECT_THROW(s0.run(bad, {}, kNoTimings), FormatError);
  bad = plan;
  bad.clear_random_u();
  EXPECT_THROW(s0.run(bad, {}, kNoTimings), FormatError);
  EXPECT_NO_THROW(s0.run(plan, {}, kNoTimings));

  StageRunner s1 = make_runner({4, 8}, 1);
  EXPECT_THROW(s1.run(plan, std::vector<uint8_t>(3), kNoTimings), FormatError);
}

}  // namespace
}  // namespace ds
